#!/bin/sh
cd "$(dirname "$0")/../../.."  # the repository root
export ENGINE_CACHE_DIR=/tmp/prebuild-measure/cache
for f in sm90 sm80 longk triton; do
  echo "== $f $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/python -m engine prebuild --family $f --library --limit 3 --layout tn --arch sm_90a --jobs 1
  echo "== $f done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  du -sb $ENGINE_CACHE_DIR/kernels
done
