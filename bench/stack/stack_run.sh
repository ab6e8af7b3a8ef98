#!/usr/bin/env bash
# On the lent GPU machine: a campaign through the whole stack (web, Redis, Celery compile
# and GPU workers, beat), with the GPU's busy fraction; writes $OUT/stack.json and stack-logs.txt.
#   usage (on the device): bash bench/stack/stack_run.sh [bench/stack/stack_run.py options]
#   or, from bench/device/gpu_run.sh's stack stage, which has installed .whl already.
# Carry .whl and .deb (bench/device/stack_wheels.sh fills them) and, for warm compiles, .carry/.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
if [[ ":${PYTHONPATH:-}:" != *":/tmp/site:"* ]] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$PWD:$PYTHONPATH" PYTHONUNBUFFERED=1
# the cache the library stages fill (kept while the machine stays warm), with carried kernels
export ENGINE_CACHE_DIR=${ENGINE_CACHE_DIR:-$PWD/.cache/device}
mkdir -p "$ENGINE_CACHE_DIR/kernels"
mark=$ENGINE_CACHE_DIR/carried.mark
for pack in .carry/kernels*.tar.xz; do
  [[ -f $pack && ! ( -f $mark && $mark -nt $pack ) ]] && tar -xJf "$pack" -C "$ENGINE_CACHE_DIR/kernels"
done
touch "$mark"
echo "kernel cache $ENGINE_CACHE_DIR: $(find "$ENGINE_CACHE_DIR/kernels" -name lib.so | wc -l) kernels"
python3 bench/stack/stack_run.py --out "$OUT" "$@" 2>&1 | tee "$OUT/stack.log" | tail -40
