#!/usr/bin/env bash
# Pack the built kernels of a local compile cache for the lent GPU machine, which unpacks them
# into its own cache (bench/device/gpu_run.sh library): compiling here saves device time.
#   usage: bash bench/device/pack_kernels.sh [CACHE_DIR] [OUT.tar.xz]   (default: .cache/gemmforge)
# Only successful builds travel (lib.so, result.json, kernel.cu, build.log, and a Triton
# kernel's gemmforge_triton.h, which bundles embed). Each lib.so travels stripped of the symbols
# no loader needs (strip --strip-unneeded keeps the dynamic ones that dlopen, dlsym and the symbol
# check read): a CUTLASS library packs to 177 KB instead of 266 KB (xz -6, measured), so about a
# third more kernels fit the carry limit.
set -euo pipefail
cache=${1:-.cache/gemmforge}
out=$(realpath -m "${2:-.carry/kernels.tar.xz}")
mkdir -p "$(dirname "$out")"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
cd "$cache/kernels"
grep -l '"ok": true' ./*/*/result.json | while read -r result; do
  entry=$(dirname "$result")
  for name in lib.so result.json kernel.cu build.log gemmforge_triton.h; do
    if [[ -f $entry/$name ]]; then echo "$entry/$name"; fi
  done
done | tar -cf - --files-from=- | tar -xf - -C "$staging"
find "$staging" -name lib.so -exec strip --strip-unneeded {} +
(cd "$staging" && tar -cf - .) | xz -6 -T2 > "$out.partial"
mv "$out.partial" "$out"  # whole or not at all: a device call may carry it now
echo "$(tar -tJf "$out" | grep -c 'lib.so$') kernels, $(du -h "$out" | cut -f1) in $out"
