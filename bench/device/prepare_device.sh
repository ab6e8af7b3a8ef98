#!/usr/bin/env bash
# Everything the lent GPU machine needs from this (CPU) machine, for a fresh checkout: the wheels
# and Debian packages it has no network for (.whl/, .deb/), and the curated kernel library built
# here and packed for carrying (.carry/kernels.tar.xz), so that the device spends no time on nvcc.
#   usage: bash bench/device/prepare_device.sh [nn|tn|all|fresh|longk|finals|wheels]
#   (default nn: the NN library kernels of every family, longk and Triton first; tn: the TN
#   subset only; all: both; fresh: the configs of the fresh replay table (bench/replay_fresh.py;
#   FRESH_SHAPES, default the newest bench/results/*-fresh-replay/shapes.json), packed as
#   .carry/kernels-fresh.tar.xz; longk: the longk experiments' kernels (LONGK_PREPARE_SETS of
#   bench/longk_bench.py, default longk-send,longk-multicast, and bench/longk_timeline.py's
#   LONGK_TIMELINE pairs with LONGK_TIMELINE_ARGS' rewrites), packed as
#   .carry/kernels-longk.tar.xz, about a minute; finals: the kernels a campaign's finals will
#   sanitize and re-measure (engine prebuild --finals FINALS_DB, default
#   .carry/holdout/holdout.sqlite; FINALS_TOP a shape, default 3), packed as
#   .carry/kernels-finals.tar.xz, 16 minutes on 2 cores for 24 shapes (51 configs, 2.1 MB);
#   wheels: the wheels and packages alone, for a first call that compiles its few kernels on
#   the device, such as `gpu_run.sh tiles`)
# The wheels take a minute. NN's 454 kernels (78 longk, 86 Triton, 194 sm90, 96 sm80) took 78
# minutes on 2 cores on 2026-12-07 (longk 2, Triton 2, sm90 52, sm80 22; 25 MB packed); all,
# with the TN subset, about 40 more; fresh (80 sm90, 40 sm80, 86 triton, 78 longk) about 35 at
# the sample's per-family means (bench/results/2026-12-06-prebuild-sample).
# Progress: .carry/prepare.log. Run it at the start of a session, in the background.
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-nn}
[[ $what =~ ^(nn|tn|all|fresh|longk|finals|wheels)$ ]] || {
  echo "usage: bash bench/device/prepare_device.sh [nn|tn|all|fresh|longk|finals|wheels]" >&2
  exit 2
}
mkdir -p .git/info .carry
for dir in /.whl/ /.deb/ /.carry/; do
  grep -qx "$dir" .git/info/exclude 2>/dev/null || echo "$dir" >>.git/info/exclude
done
PY=${PY:-.venv/bin/python}
[[ -x $PY ]] || PY=python3
exec > >(tee -a .carry/prepare.log) 2>&1
echo "$(date -u +%FT%TZ) prepare_device: $what"

ls .whl/nvidia_cutlass-4.2.0.0-*.whl >/dev/null 2>&1 || "$PY" -m pip download -q --no-deps \
  --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 \
  -d .whl nvidia-cutlass==4.2.0.0
PY=$PY bash bench/device/stack_wheels.sh

export ENGINE_CACHE_DIR=${ENGINE_CACHE_DIR:-$PWD/.cache/gemmforge}
builds=()
# every family an NN campaign searches, the quick ones first (packed after each: usable early)
[[ $what == nn || $what == all ]] && builds+=(longk:nn: triton:nn: sm90:nn: sm80:nn:)
[[ $what == tn || $what == all ]] && builds+=(sm90:tn:72 sm80:tn:40)
pack=.carry/kernels.tar.xz
if [[ $what == fresh ]]; then
  # the shapes file's family:layout:limit (library(family, layout, limit) is the table's subset)
  fresh=${FRESH_SHAPES:-$(ls bench/results/*-fresh-replay/shapes.json | tail -1)}
  read -ra builds < <("$PY" bench/replay_fresh.py builds --shapes "$fresh")
  # its own cache: the pack holds the table's kernels and nothing else
  export ENGINE_CACHE_DIR=${FRESH_CACHE_DIR:-$PWD/.cache/gemmforge-fresh}
  pack=.carry/kernels-fresh.tar.xz
fi
if [[ $what == longk ]]; then
  export ENGINE_CACHE_DIR=${LONGK_CACHE_DIR:-$PWD/.cache/gemmforge-longk}
  "$PY" bench/longk_bench.py --set "${LONGK_PREPARE_SETS:-longk-send,longk-multicast}" \
    --compile-only --jobs "$(nproc)"
  # shellcheck disable=SC2086
  "$PY" bench/longk_timeline.py --compile-only --jobs "$(nproc)" \
    ${LONGK_TIMELINE:+--pairs "$LONGK_TIMELINE"} ${LONGK_TIMELINE_ARGS:-}
  bash bench/device/pack_kernels.sh "$ENGINE_CACHE_DIR" .carry/kernels-longk.tar.xz
fi
if [[ $what == finals ]]; then
  export ENGINE_CACHE_DIR=${FINALS_CACHE_DIR:-$PWD/.cache/gemmforge-finals}
  "$PY" -m engine prebuild --finals "${FINALS_DB:-.carry/holdout/holdout.sqlite}" \
    --limit "${FINALS_TOP:-3}" --arch sm_90 --jobs "$(nproc)"
  bash bench/device/pack_kernels.sh "$ENGINE_CACHE_DIR" .carry/kernels-finals.tar.xz
fi
for build in "${builds[@]}"; do
  IFS=: read -r family layout limit <<<"$build"
  "$PY" -m engine prebuild --family "$family" --library ${limit:+--limit "$limit"} \
    --layout "$layout" --arch sm_90 --jobs "$(nproc)"
  bash bench/device/pack_kernels.sh "$ENGINE_CACHE_DIR" "$pack"  # after each family: usable early
done
echo "$(date -u +%FT%TZ) prepare_device: done"
