#!/usr/bin/env bash
# The one GPU script: install carried wheels, build, run the GPU tests and the benchmarks in a
# single call on the lent H200, writing JSON and logs under $OUT.
#   usage (on the device): bash bench/gpu_run.sh [tests|bench|all|families|campaign] [extra args]
set -uo pipefail  # pipefail: a pipeline's status is its first failing command's
stage=${1:-all}; shift || true
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ENGINE_CACHE_DIR=${ENGINE_CACHE_DIR:-/tmp/gemmforge-cache} ENGINE_COMPILE_JOBS=16
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
status=0
if [[ $stage == tests || $stage == all ]]; then
  python3 -m pytest -q -o addopts="" -p no:cacheprovider -m gpu tests/engine \
    --junitxml="$OUT/gpu-tests.xml" 2>&1 | tee "$OUT/gpu-tests.log" | tail -40 || status=1
fi
if [[ $stage == bench || $stage == all ]]; then
  python3 bench/gpu_run.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -80 || status=1
fi
if [[ $stage == campaign ]]; then  # issue 5's live campaign: 8 shapes x 64 candidates
  shapes=${CAMPAIGN_SHAPES:-256x256x256,1024x1024x1024,4096x4096x4096,8192x8192x8192,64x8192x16384,16384x128x8192,4096x16384x256,2048x8192x1024}
  python3 -m engine optimize --shapes "$shapes" --layout "${CAMPAIGN_LAYOUT:-nn}" --budget 64 \
    --proposers rl,evolve --db "$OUT/campaign.sqlite" --out "$OUT/campaign.json" "$@" 2>&1 \
    | tee "$OUT/campaign.log" | tail -60 || status=1
fi
if [[ $stage == families ]]; then
  python3 bench/family_sweep.py --out "$OUT" "$@" 2>&1 | tee "$OUT/families.log" | tail -60 || status=1
fi
exit $status
