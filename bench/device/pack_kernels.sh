#!/usr/bin/env bash
# Pack the built kernels of a local compile cache for the lent GPU machine, which unpacks them
# into its own cache (bench/device/gpu_run.sh library): compiling here saves device time.
#   usage: bash bench/device/pack_kernels.sh [CACHE_DIR] [OUT.tar.xz]   (default: .cache/gemmforge)
# Only successful builds travel (lib.so, result.json, kernel.cu, build.log, and a Triton
# kernel's gemmforge_triton.h, which bundles embed); xz shrinks a
# CUTLASS library about 4.6x (1.24 MB -> 268 KB measured).
set -euo pipefail
cache=${1:-.cache/gemmforge}
out=${2:-.carry/kernels.tar.xz}
mkdir -p "$(dirname "$out")"
cd "$cache/kernels"
grep -l '"ok": true' ./*/*/result.json | while read -r result; do
  entry=$(dirname "$result")
  for name in lib.so result.json kernel.cu build.log gemmforge_triton.h; do
    if [[ -f $entry/$name ]]; then echo "$entry/$name"; fi
  done
done | tar -cf - --files-from=- | xz -6 -T2 > "$OLDPWD/$out.partial"
mv "$OLDPWD/$out.partial" "$OLDPWD/$out"  # whole or not at all: a device call may carry it now
echo "$(tar -tJf "$OLDPWD/$out" | grep -c 'lib.so$') kernels, $(du -h "$OLDPWD/$out" | cut -f1) in $out"
