#!/usr/bin/env bash
# The one GPU script: install carried wheels, build, run the GPU tests and the benchmarks in a
# single call on the lent H200, writing JSON and logs under $OUT.
#   usage (on the device): bash bench/device/gpu_run.sh
#     [tests|bench|clock|all|checks|families|campaign|library|smoke|library2|library3|resume|
#      stack|bundle|grid64|profile|splitk|raster|reduction|tiles|cublaslt|interference|warm|
#      baselines|timed|triton|fresh|replay-fresh|offline|evenk|longk|longk-profile|longk-floor|longk-timeline|
#      throughput|llama|holdout]
#   [extra args]
set -uo pipefail  # pipefail: a pipeline's status is its first failing command's
stage=${1:-all}; shift || true
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ $stage == library* || $stage =~ ^(smoke|checks|stack|bundle|resume|grid64|profile|splitk|raster|reduction|tiles|cublaslt|interference|warm|triton|fresh|replay-fresh|offline|evenk|longk|longk-profile|longk-floor|longk-timeline|throughput|llama|holdout)$ ]]; then
  # inside the checkout (ignored): kept between calls while the lent machine stays warm
  export ENGINE_CACHE_DIR=$PWD/.cache/device
  mkdir -p "$ENGINE_CACHE_DIR/kernels"
  carried_mark=$ENGINE_CACHE_DIR/carried.mark
  # kernels compiled on the CPU machine (bench/device/pack_kernels.sh), carried as .carry/
  for pack in .carry/kernels*.tar.xz; do
    [[ -f $pack ]] && tar -xJf "$pack" -C "$ENGINE_CACHE_DIR/kernels"
  done
  echo "kernel cache: $(ls "$ENGINE_CACHE_DIR/kernels"/*/ 2>/dev/null | grep -c .) entries"
  touch "$carried_mark"
fi
export ENGINE_CACHE_DIR=${ENGINE_CACHE_DIR:-/tmp/gemmforge-cache} ENGINE_COMPILE_JOBS=16
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
if [[ $stage == library || $stage == tests || $stage == checks ]]; then  # the sandbox must not break GPU children
  if ! python3 -m pytest -q -o addopts="" -p no:cacheprovider -m gpu tests/engine/isolation/test_sandbox.py \
      tests/engine/verify/test_sanitize.py >"$OUT/sandbox-check.log" 2>&1; then
    echo "sandbox check failed: network isolation off for this run (see sandbox-check.log)"
    export ENGINE_SANDBOX_NETWORK=off
  fi
  tail -3 "$OUT/sandbox-check.log"
fi
# the spread TN subset of the library (TN_SM80, TN_SM90 configs) into the kernel cache, on 6 jobs
prebuild_tn_subset() {
  for family in sm80:${TN_SM80:-40} sm90:${TN_SM90:-72}; do
    python3 -m engine prebuild --family "${family%%:*}" --library --limit "${family#*:}" \
      --layout tn --arch sm_90 --jobs 6
  done >"$1" 2>&1
}
# every GPU test of the engine (or those of GPU_TESTS, paths, and GPU_TESTS_K, a -k expression);
# the log and JUnit XML under $OUT
gpu_tests() {
  # shellcheck disable=SC2086
  python3 -m pytest -q -o addopts="" -p no:cacheprovider -m gpu ${GPU_TESTS:-tests/engine} \
    ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} --junitxml="$OUT/gpu-tests.xml" >"$OUT/gpu-tests.log" 2>&1
}
# the kernels built here since the carried ones were unpacked come back as one file (carry them
# as .carry/ next time: no device time spent compiling them again once this machine is gone)
pack_device_kernels() {
  (cd "$ENGINE_CACHE_DIR/kernels" && find . -name result.json -newer "$carried_mark" \
    -exec grep -l '"ok": true' {} + | while read -r result; do
      entry=$(dirname "$result")
      for name in lib.so result.json kernel.cu build.log gemmforge_triton.h; do
        [[ -f $entry/$name ]] && echo "$entry/$name"
      done
    done | tar -cf - --files-from=- | xz -6 -T16 > "$OUT/kernels-device.tar.xz")
  echo "packed $(tar -tJf "$OUT/kernels-device.tar.xz" | grep -c 'lib.so$') device-built kernels"
}
# a live campaign: 8 shapes of the CUDA-L2 grid that the library sweep did not time (the policy is
# pretrained on the sweep's table, $1); resumable, so a run cut by CAMPAIGN_SECONDS goes on in a
# later call from the same database
live_campaign() {
  local shapes=${CAMPAIGN_SHAPES:-128x1024x1024,1024x512x512,4096x64x4096,2048x2048x512,512x8192x2048,2048x2048x4096,16384x256x16384,8192x4096x16384}
  timeout -k 20 -s INT "${CAMPAIGN_SECONDS:-330}" python3 -m engine optimize --shapes "$shapes" \
    --layout nn --budget "${CAMPAIGN_BUDGET:-64}" --batch 32 --proposers rl,evolve \
    --space library --verify-jobs 10 --device-seconds 2 --heat-seconds 0.3 --pretrain "$1" \
    --final-top 2 --final-device-seconds 3 --db "$ENGINE_CACHE_DIR/campaign.sqlite" \
    --out "$OUT/campaign.json" 2>&1 | tee "$OUT/campaign.log" | tail -30
  local rc=$?
  cp "$ENGINE_CACHE_DIR/campaign.sqlite" "$OUT/campaign.sqlite"
  return $rc
}
status=0
if [[ $stage == checks ]]; then
  # the GPU tests and the clock probe while the NN library compiles on 10 CPUs for the campaign
  # stages; whatever it built by the end comes back in kernels-device.tar.xz
  (for family in sm80 sm90; do
    python3 -m engine prebuild --family $family --library --layout nn --arch sm_90 --jobs 10
  done >"$OUT/prebuild-nn.log" 2>&1) &
  prebuild=$!
  ENGINE_CACHE_DIR=/tmp/gemmforge-cache ENGINE_COMPILE_JOBS=6 gpu_tests || status=1
  tail -25 "$OUT/gpu-tests.log"
  python3 bench/clock_probe.py --out "$OUT" 2>&1 | tee "$OUT/clock_probe.log" | tail -30 || status=1
  if [[ -n ${STACK_SMOKE:-} ]]; then  # the whole stack once, cold, e.g. "--budget 4 --deadline 120"
    # shellcheck disable=SC2086
    bash bench/stack/stack_run.sh $STACK_SMOKE || status=1
  fi
  sleep "${PREBUILD_MORE_SECONDS:-0}"
  pkill -INT -P $prebuild; kill $prebuild 2>/dev/null; sleep 2; pkill -f 'engine prebuild'
  pack_device_kernels
fi
if [[ $stage == tests || $stage == all ]]; then
  gpu_tests || status=1
  tail -40 "$OUT/gpu-tests.log"
fi
if [[ $stage == bench || $stage == all ]]; then
  python3 bench/device/gpu_run.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -80 || status=1
fi
if [[ $stage == timed ]]; then  # the timed checks' cost, baselines with and without them
  python3 bench/timed_checks.py --out "$OUT" "$@" 2>&1 | tee "$OUT/timed_checks.log" | tail -40 \
    || status=1
fi
if [[ $stage == offline ]]; then  # offline vs device protocol, with and without the checks
  # (NOTES §25): carry the four kernels as .carry/kernels-offline.tar.xz or they build here;
  # nvidia-smi's clocks every 200 ms beside NVML's (which needs pynvml)
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 200 >"$OUT/offline_smi.csv" 2>&1 &
  smi=$!
  python3 bench/offline_device.py --out "$OUT" "$@" 2>&1 | tee "$OUT/offline_device.log" \
    | tail -30 || status=1
  kill $smi 2>/dev/null
fi
if [[ $stage == clock || $stage == all ]]; then  # device protocol vs bursts, clocks
  python3 bench/clock_probe.py --out "$OUT" 2>&1 | tee "$OUT/clock_probe.log" | tail -30 || status=1
fi
if [[ $stage == campaign ]]; then  # a live campaign: 8 shapes x 64 candidates
  shapes=${CAMPAIGN_SHAPES:-256x256x256,1024x1024x1024,4096x4096x4096,8192x8192x8192,64x8192x16384,16384x128x8192,4096x16384x256,2048x8192x1024}
  python3 -m engine optimize --shapes "$shapes" --layout "${CAMPAIGN_LAYOUT:-nn}" --budget 64 \
    --proposers rl,evolve --db "$ENGINE_CACHE_DIR/campaign.sqlite" --out "$OUT/campaign.json" "$@" 2>&1 \
    | tee "$OUT/campaign.log" | tail -60 || status=1
fi
if [[ $stage == families ]]; then
  python3 bench/family_sweep.py --out "$OUT" "$@" 2>&1 | tee "$OUT/families.log" | tail -60 || status=1
fi
if [[ $stage == library ]]; then  # the curated library, built, verified, timed (NN)
  # the TN subset of library2 compiles on the CPUs meanwhile (the GPU times NN)
  prebuild_tn_subset "$OUT/prebuild-tn1.log" &
  python3 bench/family_sweep.py --out "$OUT" --library --layouts nn --verify-jobs 12 --time nn=0:24 \
    --device-seconds 3 --deadline "${LIBRARY_DEADLINE:-500}" "$@" 2>&1 \
    | tee "$OUT/library.log" | tail -60 || status=1
  cp "$OUT/families.json" "$ENGINE_CACHE_DIR/library-run1.json"
  pack_device_kernels
fi
if [[ $stage == fresh ]]; then  # a replay table of shapes no earlier table holds (NN library)
  shapes=$(python3 bench/fresh_shapes.py --count 16 --seed "${FRESH_SEED:-2031}")
  echo "$shapes" > "$OUT/fresh-shapes.txt"
  python3 bench/family_sweep.py --out "$OUT" --library --layouts nn --verify-jobs 12 --shapes "$shapes" \
    --time nn=0:16 --device-seconds 3 --deadline "${FRESH_DEADLINE:-480}" "$@" 2>&1 \
    | tee "$OUT/fresh.log" | tail -60 || status=1
  pack_device_kernels
fi
if [[ $stage == replay-fresh ]]; then  # the fresh replay table (bench/replay_fresh.py record): the
  # configs and shapes bench/results/*-fresh-replay/shapes.json froze (REPLAY_FRESH_SHAPES), built
  # (carry them: `bash bench/device/prepare_device.sh fresh` packs .carry/kernels-fresh.tar.xz; the
  # sm90 and sm80 ones would take about 4 of the 10 minutes to build here, Triton and longk under
  # half a minute), verified once each, timed shape by shape; no shape starts after
  # REPLAY_FRESH_DEADLINE s. A call cut short goes on with REPLAY_FRESH_RESUME=<its table> (on a
  # warm machine: the table kept in the device cache)
  shapes_file=${REPLAY_FRESH_SHAPES:-$(ls bench/results/*-fresh-replay/shapes.json | tail -1)}
  resume=${REPLAY_FRESH_RESUME:-}
  [[ -z $resume && -f $ENGINE_CACHE_DIR/fresh-table.json ]] && resume=$ENGINE_CACHE_DIR/fresh-table.json
  timeout -k 10 -s TERM "${REPLAY_FRESH_SECONDS:-560}" python3 bench/replay_fresh.py record \
    --shapes "$shapes_file" --out "$OUT/fresh-table.json" --deadline "${REPLAY_FRESH_DEADLINE:-470}" \
    --device-seconds "${REPLAY_FRESH_DEVICE_SECONDS:-3}" --verify-jobs 16 \
    ${resume:+--resume "$resume"} "$@" 2>&1 | tee "$OUT/fresh-record.log" | tail -40 || status=1
  cp "$OUT/fresh-table.json" "$ENGINE_CACHE_DIR/fresh-table.json" 2>/dev/null
  pack_device_kernels
fi
if [[ $stage == smoke ]]; then  # every library2 code path in a minute, before the long run
  run1=$ENGINE_CACHE_DIR/library-run1.json
  python3 -m engine optimize --shapes 1024x1024x1024 --layout nn --budget 8 --batch 8 \
    --proposers rl,evolve --space library --verify-jobs 8 --device-seconds 1 --heat-seconds 0.3 \
    --pretrain "$run1" --final-top 1 --final-device-seconds 1 --no-save-policy \
    --db "$ENGINE_CACHE_DIR/smoke.sqlite" --out "$OUT/smoke-campaign.json" >"$OUT/smoke.log" 2>&1 \
    || status=1
  python3 -m engine.llm.tiny "$ENGINE_CACHE_DIR/tiny-llm" >/dev/null
  python3 -m engine optimize --shapes 1024x1024x1024 --layout nn --budget 2 --batch 2 \
    --proposers llm --llm-model "$ENGINE_CACHE_DIR/tiny-llm" --llm-device cuda \
    --llm-max-tokens 64 --llm-turns 1 --final-top 0 --db "$ENGINE_CACHE_DIR/smoke-llm.sqlite" \
    --out "$OUT/smoke-llm.json" >>"$OUT/smoke.log" 2>&1 || status=1
  tail -25 "$OUT/smoke.log"
fi
if [[ $stage == library2 ]]; then  # a live campaign, an LLM campaign, TN configs and the sanitizer
  run1=$ENGINE_CACHE_DIR/library-run1.json
  [[ -f $run1 ]] || run1=${LIBRARY_RUN1:?the first library run is neither cached nor given}
  # a spread subset of the TN library compiles on the CPUs while the GPU runs the campaign
  tn_limits=(--library-limit sm90:tn=${TN_SM90:-72} --library-limit sm80:tn=${TN_SM80:-40})
  prebuild_tn_subset "$OUT/prebuild-tn.log" &
  prebuild=$!
  # 8 shapes of the CUDA-L2 grid that the library sweep did not time (the policy is
  # pretrained on the sweep's shapes); resumable, so a run cut by the time limit goes on later
  live_campaign "$run1" || status=1
  if [[ -z ${SKIP_LLM:-} ]]; then  # an LLM campaign through a local (tiny, random) model
    python3 -m engine.llm.tiny "$ENGINE_CACHE_DIR/tiny-llm" >/dev/null
    python3 -m engine optimize --shapes 4096x4096x4096 --layout nn --budget 8 --batch 4 \
      --proposers llm --llm-model "$ENGINE_CACHE_DIR/tiny-llm" --llm-device cuda \
      --llm-max-tokens 256 --final-top 0 --db "$ENGINE_CACHE_DIR/llm.sqlite" \
      --out "$OUT/llm-campaign.json" 2>&1 | tee "$OUT/llm-campaign.log" | tail -12 || status=1
  fi
  wait $prebuild
  # the TN subset verified; the NN shapes the first library run did not reach and four TN shapes
  # timed; then the sanitizer on every shape's best
  left=$(( ${LIBRARY2_END:-520} - SECONDS )); (( left > 0 )) || left=1
  python3 bench/family_sweep.py --out "$OUT" --library "${tn_limits[@]}" --verify-jobs 12 \
    --verdicts "$run1" --merge "$run1" --time tn=5:9 --device-seconds 2 --deadline "$left" \
    --sanitize-best 2>&1 | tee "$OUT/library2.log" | tail -30 || status=1
fi
if [[ $stage == library3 ]]; then  # the TN sm90 subset verified on top of the second library run
  run2=${LIBRARY_RUN2:-bench/results/2026-12-03-h200-library/library-run2.json}
  # the GPU tests beside the verification (both use the GPU, neither times anything)
  ENGINE_CACHE_DIR=/tmp/gemmforge-cache ENGINE_COMPILE_JOBS=10 gpu_tests &
  tests=$!
  mkdir -p "$OUT/verify"
  python3 bench/family_sweep.py --out "$OUT/verify" --library --families sm90 --layouts tn \
    --library-limit "sm90:tn=${TN_SM90:-72}" --verify-jobs 8 --verdicts "$run2" --merge "$run2" \
    --time tn=0:0 2>&1 | tee "$OUT/library3-verify.log" | tail -8 || status=1
  wait $tests || status=1
  tail -6 "$OUT/gpu-tests.log"
  # then, with the GPU to itself, TN shapes that the second run did not time
  python3 bench/family_sweep.py --out "$OUT" --library --families sm90 --layouts tn \
    --library-limit "sm90:tn=${TN_SM90:-72}" --verdicts "$OUT/verify/families.json" \
    --merge "$OUT/verify/families.json" --time "${LIBRARY3_TIME:-tn=9:11}" --device-seconds 2 \
    --deadline "${LIBRARY3_DEADLINE:-120}" 2>&1 | tee "$OUT/library3.log" | tail -12 || status=1
fi
if [[ $stage == resume ]]; then  # the live campaign, resumed from the committed database
  [[ -f $ENGINE_CACHE_DIR/campaign.sqlite ]] \
    || cp "${CAMPAIGN_DB:-bench/results/2026-12-03-h200-library/campaign.sqlite}" "$ENGINE_CACHE_DIR/campaign.sqlite"
  live_campaign "${LIBRARY_RUN1:-bench/results/2026-12-03-h200-library/library-run1.json}" || status=1
fi
if [[ $stage == grid64 ]]; then  # the 64-shape campaign, resumed across sessions
  # from the database the last session committed (GRID64_DB); NN first, then its TN quarter
  # (and the finals measured so far, engine.execution.final.SavedFinals, beside it); GRID64_LAYOUTS
  # picks the layouts ("nn tn"), GRID64_PROPOSERS the mix (the transfer proposer carries each
  # shape's other-layout and neighbours' winners over: bench/results/2026-12-04-replay-transfer)
  grid64_db=${GRID64_DB:-bench/results/grid64/campaign.sqlite}
  [[ -f $ENGINE_CACHE_DIR/grid64.sqlite ]] || cp "$grid64_db" "$ENGINE_CACHE_DIR/grid64.sqlite" 2>/dev/null
  [[ -f $ENGINE_CACHE_DIR/grid64.finals.json ]] \
    || cp "${grid64_db%.sqlite}.finals.json" "$ENGINE_CACHE_DIR/grid64.finals.json" 2>/dev/null
  # GRID64_FOCUS=N: first a top-up of the campaign (its own name, GRID64_FOCUS_BUDGET candidates
  # per shape) on the N shapes furthest under cuBLASLt-autotune and the large ones under 0.98
  # (bench/grid64.py focus); the whole campaign's run after it then only gathers every shape's
  # finals, those of the unchanged shapes from the saved ones
  # GRID64_PROPOSERS with mirror: cuBLASLt's kernels from the cublaslt stage (or CUBLASLT_KERNELS,
  # files separated by ':', merged) (named first here, without timing, when neither exists)
  mirror_args=()
  if [[ ${GRID64_PROPOSERS:-} == *mirror* ]]; then
    if [[ -n ${CUBLASLT_KERNELS:-} ]]; then
      IFS=: read -ra kernel_files <<<"$CUBLASLT_KERNELS"
    else
      kernel_files=("$ENGINE_CACHE_DIR/cublaslt-kernels.json")
      [[ -f ${kernel_files[0]} ]] || python3 bench/cublaslt_kernels.py --out "${kernel_files[0]}" \
        2>&1 | tee "$OUT/cublaslt-kernels.log" | tail -3
      cp "${kernel_files[0]}" "$OUT/cublaslt-kernels.json" 2>/dev/null
    fi
    for file in "${kernel_files[@]}"; do mirror_args+=(--cublaslt-kernels "$file"); done
  fi
  grid64_optimize() {  # layout, shapes, budget, results file, then extra options
    local layout=$1 shapes=$2 budget=$3 out=$4; shift 4
    timeout -k 20 -s INT "$(( ${GRID64_SECONDS:-480} - SECONDS > 1 ? ${GRID64_SECONDS:-480} - SECONDS : 1 ))" \
      python3 -m engine optimize --shapes "$shapes" --layout "$layout" "$@" "${mirror_args[@]}" \
      --budget "$budget" --batch 32 --proposers "${GRID64_PROPOSERS:-rl,evolve,transfer}" --space library \
      --verify-jobs "${GRID64_VERIFY_JOBS:-16}" --device-seconds 2 --heat-seconds 0.3 \
      --pretrain "${LIBRARY_RUN:-bench/results/2026-12-03-h200-run9/library3/library-run3.json}" \
      --final-top 2 --final-device-seconds "${GRID64_FINAL_SECONDS:-2}" --db "$ENGINE_CACHE_DIR/grid64.sqlite" \
      --out "$out" 2>&1 | tee -a "$OUT/grid64.log" | tail -12
  }
  for layout in ${GRID64_LAYOUTS:-nn tn}; do
    if [[ -n ${GRID64_FOCUS:-} ]]; then
      focus=$(python3 bench/grid64.py focus "$ENGINE_CACHE_DIR/grid64.sqlite" "$layout" "$GRID64_FOCUS")
      if [[ -n $focus ]]; then
        grid64_optimize "$layout" "$focus" "${GRID64_FOCUS_BUDGET:-48}" "$OUT/grid64-$layout-focus.json" \
          --name "$(python3 bench/grid64.py name "$layout")" || { status=1; break; }
      fi
    fi
    grid64_optimize "$layout" "$(python3 bench/grid64.py "$layout")" "${GRID64_BUDGET:-32}" \
      "$OUT/grid64-$layout.json" || { status=1; break; }
  done
  cp "$ENGINE_CACHE_DIR/grid64.sqlite" "$OUT/grid64.sqlite"
  cp "$ENGINE_CACHE_DIR/grid64.finals.json" "$OUT/grid64.finals.json" 2>/dev/null
fi
if [[ $stage == profile ]]; then  # a verifier's time with 1 to 16 running at once
  mps_args=()
  if [[ ${PROFILE_MPS:-0} == 1 ]]; then  # A/B: the same batches as clients of an MPS server
    mps_pipe=$(python3 -m engine.gpu.mps start "${TMPDIR:-/tmp}/gemmforge-mps" 2>&1 | tee -a "$OUT/mps.log" | tail -1)
    [[ -d $mps_pipe ]] && mps_args=(--variant "mps:ENGINE_VERIFY_MPS_PIPE=$mps_pipe")
  fi
  python3 bench/verify_profile.py --db "${GRID64_DB:-bench/results/grid64/campaign.sqlite}" \
    --out "$OUT/verify-profile${PROFILE_TAG:-}.json" ${PROFILE_ARGS:-} "${mps_args[@]}" 2>&1 \
    | tee "$OUT/verify-profile${PROFILE_TAG:-}.log" | tail -20 || status=1
  [[ ${PROFILE_MPS:-0} == 1 ]] && python3 -m engine.gpu.mps stop "${TMPDIR:-/tmp}/gemmforge-mps" >>"$OUT/mps.log" 2>&1
  mps_args=()
fi
if [[ $stage == interference ]]; then  # timing while other processes create contexts
  python3 bench/context_interference.py --out "$OUT/context-interference.json" \
    ${INTERFERENCE_ARGS:-} 2>&1 | tee "$OUT/context-interference.log" | tail -24 || status=1
fi
if [[ $stage == warm ]]; then  # warm verifiers (bench/NOTES.md §17): is a timing moved by
  # contexts created beside it; the warm paths' GPU tests; 16 verifiers warm (on, kernels) or not
  python3 bench/context_interference.py --device-seconds 1 --out "$OUT/context-interference.json" \
    2>&1 | tee "$OUT/context-interference.log" | tail -24 || status=1
  GPU_TESTS=${GPU_TESTS:-"tests/engine/verify/test_gpu_warm_verifiers.py tests/engine/campaign/test_gpu_step_standby.py tests/engine/campaign/test_campaign_final.py tests/engine/verify/test_gpu_harness.py::test_heating_while_verifiers_work_leaves_the_timing_no_heat_up_to_run tests/engine/verify/test_gpu_harness.py::test_the_record_names_the_kernels_cublaslt_ran"}
  gpu_tests || status=1
  tail -5 "$OUT/gpu-tests.log"
  python3 bench/verify_profile.py --db "${GRID64_DB:-bench/results/grid64/campaign.sqlite}" \
    --shapes 4096x4096x4096 --jobs 16 --variant warm:ENGINE_VERIFY_WARM=on \
    --variant warmk:ENGINE_VERIFY_WARM=kernels \
    --variant warmheat:ENGINE_VERIFY_WARM=on,ENGINE_HEAT_WHILE_VERIFYING=on \
    --out "$OUT/verify-profile-warm.json" 2>&1 \
    | tee "$OUT/verify-profile-warm.log" | tail -8 || status=1
fi
if [[ $stage == splitk ]]; then  # deep split-K on the grid's small-M·N, long-K shapes
  python3 bench/deep_splitk.py --db "${GRID64_DB:-bench/results/grid64/campaign.sqlite}" \
    --out "$OUT/deep-splitk.json" 2>&1 | tee "$OUT/deep-splitk.log" | tail -14 || status=1
fi
if [[ $stage == raster ]]; then  # raster orders and swizzles on the large NN shapes
  python3 bench/deep_splitk.py --set raster --db "${GRID64_DB:-bench/results/grid64/campaign.sqlite}" \
    --out "$OUT/raster.json" 2>&1 | tee "$OUT/raster.log" | tail -10 || status=1
fi
if [[ $stage == cublaslt ]]; then  # the kernels cuBLASLt runs on the campaign's problems
  python3 bench/cublaslt_kernels.py ${CUBLASLT_AUTOTUNE:+--autotune "$CUBLASLT_AUTOTUNE"} \
    --out "$OUT/cublaslt-kernels.json" 2>&1 | tee "$OUT/cublaslt-kernels.log" | tail -12 || status=1
  # kept while the machine stays warm: grid64 with GRID64_PROPOSERS=...,mirror reads it
  cp "$OUT/cublaslt-kernels.json" "$ENGINE_CACHE_DIR/cublaslt-kernels.json" 2>/dev/null
fi
if [[ $stage == reduction ]]; then  # fused split-K reductions (PDL, cluster), GPU tests first
  python3 -m pytest -q -o addopts="" -p no:cacheprovider -m gpu tests/engine/codegen/test_gpu_split_reductions.py \
    2>&1 | tee "$OUT/reduction-tests.log" | tail -5 || status=1
  python3 bench/deep_splitk.py --set reduction --verify-jobs 16 \
    --device-seconds "${REDUCTION_DEVICE_SECONDS:-1}" \
    --db "${GRID64_DB:-bench/results/grid64/campaign.sqlite}" \
    --out "$OUT/reduction.json" 2>&1 | tee "$OUT/reduction.log" | tail -14 || status=1
fi
if [[ $stage == tiles ]]; then  # split-N, transposed tiles, wide epilogue tiles, odd tile N; GPU
  # tests first (TILES_TESTS=0 skips them); TILES_SETS: which of deep_splitk.py's sets
  if [[ ${TILES_TESTS:-1} != 0 ]]; then
    python3 -m pytest -q -o addopts="" -p no:cacheprovider -m gpu tests/engine/codegen/test_gpu_sm90_tiles.py \
      2>&1 | tee "$OUT/tiles-tests.log" | tail -5 || status=1
  fi
  for set in ${TILES_SETS:-splitn transposed epilogue oddn}; do
    python3 bench/deep_splitk.py --set "$set" --verify-jobs 16 \
      --device-seconds "${TILES_DEVICE_SECONDS:-1}" \
      --db "${GRID64_DB:-bench/results/grid64/campaign.sqlite}" \
      --out "$OUT/$set.json" 2>&1 | tee "$OUT/$set.log" | tail -14 || status=1
  done
fi
if [[ $stage == baselines ]]; then  # every baseline, Inductor max-autotune and
  # TunableOp included, on the 12 harness shapes and 16 grid64 shapes, with NVML power and clock
  # and the floor model's predictions; the GPU tests of those first; in all under 7 minutes
  # (BASELINES_SECONDS): the run stops starting shapes that would not finish in time
  # shellcheck disable=SC2086
  timeout -k 10 "${BASELINES_TESTS_SECONDS:-100}" python3 -m pytest -q -o addopts="" \
    -p no:cacheprovider -m gpu ${GPU_TESTS:-tests/engine/timing/test_torch_baselines.py \
    tests/engine/gpu/test_power.py tests/engine/timing/test_floor_model.py} \
    --junitxml="$OUT/gpu-tests.xml" >"$OUT/gpu-tests.log" 2>&1 || status=1
  tail -5 "$OUT/gpu-tests.log"
  left=$(( ${BASELINES_SECONDS:-390} - SECONDS - 20 )); (( left > 30 )) || left=30
  # shellcheck disable=SC2086
  timeout -k 10 -s INT $(( left + 40 )) python3 bench/baselines_run.py --out "$OUT" \
    --deadline "$left" ${BASELINES_ARGS:-} 2>"$OUT/baselines.log" | tee "$OUT/baselines-tables.log" \
    | tail -75 || status=1
  tail -3 "$OUT/baselines.log"
fi
if [[ $stage == triton ]]; then  # the triton family (Inductor's configs and a sweep) on
  # the latency-bound and long-K small-M·N grid shapes, beside cuBLASLt-autotune and our best
  # kernel, in the device protocol; TRITON_ARGS adds options (e.g. "--limit 20 --sweep 6");
  # TRITON_TESTS=1 first runs the family's GPU tests (≈ 2 min more)
  if [[ -n ${TRITON_TESTS:-} ]]; then
    GPU_TESTS=tests/engine/codegen/test_gpu_triton.py gpu_tests || status=1
    tail -5 "$OUT/gpu-tests.log"
  fi
  # shellcheck disable=SC2086
  python3 bench/triton_bench.py --db "${GRID64_DB:-bench/results/grid64/campaign.sqlite}" \
    --deadline "${TRITON_DEADLINE:-420}" --out "$OUT/triton.json" ${TRITON_ARGS:-} 2>&1 \
    | tee "$OUT/triton.log" | tail -45 || status=1
  pack_device_kernels
fi
if [[ $stage == longk ]]; then  # cluster split-K (the longk family) beside the sm80 and Triton
  # split-K kernels and cuBLASLt on the long-K, few-tile shapes; the family's GPU tests first
  # (when they fail, only the baselines are timed, unless LONGK_SET says otherwise; about 4
  # minutes on an H100 since the groups configs joined them: LONGK_TESTS_SECONDS)
  # (LONGK_TESTS_K: a -k expression, e.g. mc2 for the multicast configs' tests alone)
  timeout -k 10 "${LONGK_TESTS_SECONDS:-420}" python3 -m pytest -q -o addopts="" -p no:cacheprovider \
    -m gpu tests/engine/codegen/test_gpu_longk.py ${LONGK_TESTS_K:+-k "$LONGK_TESTS_K"} \
    >"$OUT/longk-tests.log" 2>&1
  tests_rc=$?
  tail -8 "$OUT/longk-tests.log"
  sets=${LONGK_SET:-baseline,longk}
  (( tests_rc == 0 )) || { status=1; sets=${LONGK_SET:-baseline}; }
  # shellcheck disable=SC2086
  python3 bench/longk_bench.py --set "$sets" --verify-jobs 12 \
    --device-seconds "${LONGK_DEVICE_SECONDS:-2}" --out "$OUT/longk.json" ${LONGK_ARGS:-} 2>&1 \
    | tee "$OUT/longk.log" | tail -80 || status=1
  pack_device_kernels
fi
if [[ $stage == longk-timeline ]]; then  # where a longk kernel's time goes, phase by phase
  # (global-timer stamps per CTA; LONGK_TIMELINE: shape/tile_n/stages/splits/swap,...;
  # LONGK_TIMELINE_ARGS: more flags, e.g. --rewrites relaxed_tail)
  # shellcheck disable=SC2086
  timeout -k 10 "${LONGK_TIMELINE_SECONDS:-240}" python3 bench/longk_timeline.py \
    --out "$OUT/longk-timeline.json" ${LONGK_TIMELINE:+--pairs "$LONGK_TIMELINE"} ${LONGK_TIMELINE_ARGS:-} 2>&1 \
    | tee "$OUT/longk-timeline.log" | tail -20 || status=1
fi
if [[ $stage == longk-floor ]]; then  # an empty kernel, torch.matmul and the LONGK_FLOOR pairs
  # (bench/longk_profile.py's SHAPE/TILE_N/... form) after each of LONGK_FLUSHES (write: the
  # device protocol's zeroing flush; read: a flush that leaves L2 clean), interleaved
  python3 bench/longk_floor.py --pairs "${LONGK_FLOOR:?LONGK_FLOOR: the pairs to time}" \
    --flushes "${LONGK_FLUSHES:-write,read}" --reps "${LONGK_FLOOR_REPS:-300}" \
    --out "$OUT/longk-floor.json" 2>&1 | tee "$OUT/longk-floor.log" | tail -30 || status=1
fi
if [[ $stage == longk-profile ]]; then  # Nsight Compute on each shape's fastest longk kernel of
  # the longk stage's report (or LONGK_PROFILE: shape/tile_n/stages/splits/swap/ctas_per_sm,...):
  # DRAM throughput, occupancy, L2 hit rate and stall reasons
  python3 bench/longk_profile.py --out "$OUT" --best-of "$OUT/longk.json" ${LONGK_PROFILE:+--pairs "$LONGK_PROFILE"} 2>&1 \
    | tee "$OUT/longk-profile.log" | tail -60 || status=1
  # the same kernels, torch.matmul and an empty kernel timed alike: how much is the launch
  python3 bench/longk_floor.py --best-of "$OUT/longk.json" --out "$OUT/longk-floor.json" 2>&1 \
    | tee "$OUT/longk-floor.log" | tail -20 || status=1
fi
if [[ $stage == stack ]]; then  # a campaign through web, Redis and Celery workers
  bash bench/stack/stack_run.sh "$@" || status=1
fi
if [[ $stage == bundle ]]; then  # a campaign on shapes where the library beat torch.matmul
  run1=${LIBRARY_RUN1:-bench/results/2026-12-03-h200-library/library-run1.json}
  db=$ENGINE_CACHE_DIR/bundle-campaign.sqlite
  python3 -m engine optimize --shapes "${BUNDLE_SHAPES:-4096x4096x1024,2048x8192x1024,64x8192x16384}" \
    --layout "${BUNDLE_LAYOUT:-nn}" --budget "${BUNDLE_BUDGET:-8}" --batch 8 --proposers rl,evolve --space library \
    --verify-jobs 8 --device-seconds 2 --heat-seconds 0.3 --pretrain "$run1" --final-top 1 \
    --final-device-seconds 2 --no-save-policy --db "$db" --out "$OUT/bundle-campaign.json" \
    >"$OUT/bundle-campaign.log" 2>&1 || status=1
  tail -12 "$OUT/bundle-campaign.log"
  cp "$db" "$OUT/bundle-campaign.sqlite"
  python3 bench/bundle_check.py --db "$db" --out "$OUT/bundle-check" --jobs 16 "$@" 2>&1 \
    | tail -30 || status=1
  # host time per call, CUDA-graph time and a Llama-style MLP block, bundle vs torch
  python3 bench/bundle_overhead.py --db "$db" --out "$OUT/bundle-overhead" --jobs 16 \
    ${BUNDLE_OVERHEAD_ARGS:-} 2>&1 | tail -40 || status=1
fi
if [[ $stage == evenk ]]; then  # a Triton campaign whose best kernel is an evenk config (K whole
  # K tiles), kept through the sanitizer, the finals and engine bundle: first the sanitizer's GPU
  # tests (an evenk kernel refuses K = 1032 and passes where its config allows; EVENK_TESTS=0
  # skips them), then the campaign
  if [[ ${EVENK_TESTS:-1} == 1 ]]; then
    GPU_TESTS=tests/engine/verify/test_sanitize.py gpu_tests || status=1
    tail -3 "$OUT/gpu-tests.log"
  fi
  db=$ENGINE_CACHE_DIR/evenk.sqlite
  rm -f "$db" "${db%.sqlite}.finals.json"  # a fresh campaign: nothing reused from a warm machine
  timeout -k 20 -s INT "${EVENK_SECONDS:-300}" python3 -m engine optimize \
    --shapes "${EVENK_SHAPES:-256x128x128,1024x128x128}" --layout nn --families triton \
    --space library --budget "${EVENK_BUDGET:-16}" --batch 8 --proposers rl,evolve \
    --verify-jobs 8 --device-seconds 1 --heat-seconds 0.3 --final-top 2 \
    --final-device-seconds 2 --final-torch-baselines '' --no-save-policy --name evenk \
    --db "$db" --out "$OUT/evenk-campaign.json" >"$OUT/evenk-campaign.log" 2>&1 || status=1
  tail -12 "$OUT/evenk-campaign.log"
  cp "$db" "${db%.sqlite}.finals.json" "$OUT/" 2>/dev/null
  python3 -m engine bundle evenk --db "$db" --out "$OUT/evenk-bundle.zip" --include-slower \
    >"$OUT/evenk-bundle.log" 2>&1 || status=1
  python3 - "$OUT" <<'PY' || status=1
import json, sys
from pathlib import Path
from engine.publish.bundle import read_manifest
out = Path(sys.argv[1])
report = json.loads((out / "evenk-campaign.json").read_text())
bundled = {k["name"] for k in read_manifest(out / "evenk-bundle.zip")["kernels"]}
rows = []
for entry in report["problems"]:
    final = report.get("final", {}).get(entry["problem"], {})
    verdict = final.get("sanitize", {}).get(entry["best"] or "", {})
    rows.append({"problem": entry["problem"], "search_best": entry.get("search_best"),
                 "final_best": entry["best"], "final_error": entry.get("final_error"),
                 "speedups": entry.get("final_speedups"), "sanitize": verdict.get("reason"),
                 "sanitize_problems": verdict.get("problem"), "bundled": entry["best"] in bundled})
kept = [r for r in rows if (r["final_best"] or "").endswith("evenk") and r["sanitize"] == "ok"]
summary = {"shapes": rows, "bundle": sorted(bundled), "evenk_kept": len(kept),
           "evenk_bundled": sum(name.endswith("evenk") for name in bundled)}
(out / "evenk-check.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
print(f"shapes whose final best is an evenk kernel that passed the sanitizer: {len(kept)} of "
      f"{len(rows)}; evenk kernels in the bundle: {summary['evenk_bundled']}")
sys.exit(0 if kept and summary["evenk_bundled"] else 1)
PY
  # the bundle as a user gets it: built, verified, and run through torch (eager, graph,
  # torch.compile, nn.Linear) at each bundled shape
  timeout -k 10 "${EVENK_BUNDLE_SECONDS:-240}" python3 bench/bundle_check.py --db "$db" \
    --campaign evenk --out "$OUT/evenk-bundle-check" >"$OUT/evenk-bundle-check.log" 2>&1 || status=1
  tail -15 "$OUT/evenk-bundle-check.log"
  (cd "$OUT" && tar -cJf evenk-bundle-check.tar.xz evenk-bundle-check && rm -rf evenk-bundle-check)
fi
if [[ $stage == throughput ]]; then  # a user's first campaign: 8 shapes of mixed sizes,
  # budget 12, default proposers, library space, finals included, as a user runs it; the wall
  # time, the GPU's busy share and where the time went from its summary and results JSON.
  # THROUGHPUT_CACHE=empty: an empty kernel cache (every core compiles); else the device cache
  # with the carried kernels (.carry/kernels*.tar.xz: the library prebuilt elsewhere)
  # THROUGHPUT_PREBUILD_SECONDS=N: first `engine prebuild --library` of the GPU's families in
  # THROUGHPUT_LAYOUT for about N s (what it built stays in the device cache while the machine
  # is warm, so calls add up; THROUGHPUT_CAMPAIGN=0 skips the campaign and packs what was built
  # as kernels-device.tar.xz, to carry as .carry/ to a later machine)
  cache=$ENGINE_CACHE_DIR
  if [[ ${THROUGHPUT_CACHE:-prebuilt} == empty ]]; then
    cache=$(mktemp -d /tmp/throughput-cache.XXXX)
  elif [[ -n ${THROUGHPUT_PREBUILD_SECONDS:-} ]]; then
    prebuild_started=$SECONDS
    for family in ${THROUGHPUT_FAMILIES:-sm90 sm80 triton}; do
      left=$((THROUGHPUT_PREBUILD_SECONDS - (SECONDS - prebuild_started)))
      ((left > 0)) || break
      # on INT it lets its running builds finish (each in its own session: a KILL would orphan
      # them), so it ends up to a build's time (about a minute) after N s
      timeout -k 120 -s INT "$left" python3 -m engine prebuild --family "$family" --library \
        --layout "${THROUGHPUT_LAYOUT:-tn}" --arch sm_90 --jobs 16
    done >>"$OUT/throughput-prebuild.log" 2>&1
    echo "prebuild: $((SECONDS - prebuild_started)) s" | tee -a "$OUT/throughput-prebuild.log"
  fi
  work=$(mktemp -d /tmp/throughput.XXXX)  # a fresh campaign and policy file: nothing resumed
  nproc >"$OUT/throughput-host.txt"
  echo "kernel cache $cache: $(find "$cache/kernels" -name lib.so 2>/dev/null | wc -l) kernels" \
    | tee -a "$OUT/throughput-host.txt"
  if [[ ${THROUGHPUT_CAMPAIGN:-1} == 0 ]]; then
    pack_device_kernels
  else
  # shellcheck disable=SC2086
  ENGINE_CACHE_DIR=$cache timeout -k 20 -s INT "${THROUGHPUT_SECONDS:-560}" python3 -m engine \
    optimize --shapes "${THROUGHPUT_SHAPES:-64x4096x4096,256x1024x8192,512x512x512,1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x1024x4096,1024x8192x2048}" \
    --layout "${THROUGHPUT_LAYOUT:-tn}" --budget "${THROUGHPUT_BUDGET:-12}" --space library \
    --name throughput --db "$work/campaign.sqlite" --policy "$work/policy.pt" \
    --out "$OUT/throughput.json" ${THROUGHPUT_ARGS:-} >"$OUT/throughput.log" 2>&1 || status=1
  tail -16 "$OUT/throughput.log"
  cp "$work/campaign.sqlite" "$OUT/throughput.sqlite" 2>/dev/null
  python3 - "$OUT" <<'PY' || status=1
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
report = json.loads((out / "throughput.json").read_text())
times = report.get("throughput", {})
wall, busy = times.get("wall_seconds"), times.get("gpu_busy_fraction")
check = {
    "wall_seconds": wall,
    "gpu_busy_fraction": busy,
    "first_verified_seconds": times.get("first_verified_seconds"),
    "to_final_seconds": times.get("to_final_seconds"),
    "candidates_per_wall_hour": times.get("candidates_per_wall_hour"),
    "compiles": times.get("compiles"),
    "shapes_with_a_final": sum(p.get("best") is not None for p in report["problems"]),
    "wall_within_400_s": wall is not None and wall <= 400,
    "gpu_busy_at_least_half": busy is not None and busy >= 0.5,
}
(out / "throughput-check.json").write_text(json.dumps(check, indent=1))
print(json.dumps(check, indent=1))
PY
  fi
fi
if [[ $stage == llama ]]; then  # the user's proof (bench/llama_proof.py): a bundle against
  # torch.matmul, TunableOp and torch.compile max-autotune on a Llama layer's projections and
  # MLP block, eager and CUDA-graph, device and host time; the bundle is LLAMA_BUNDLE (a zip),
  # else written from LLAMA_DB (a campaign's SQLite with its finals beside it; default the
  # recorded H200 grid64 campaign), campaign LLAMA_CAMPAIGN or the database's latest.
  # LLAMA_CAMPAIGN_BUDGET=N: first a campaign of N candidates a problem on the proof's own
  # projections at each M (TN, library space, default proposers, finals with cuBLASLt's pinned
  # algorithms), its database in the device cache (a call cut by LLAMA_CAMPAIGN_SECONDS resumes
  # it on a warm machine), and the bundle from it
  if [[ -n ${LLAMA_CAMPAIGN_BUDGET:-} ]]; then
    llama_db=$ENGINE_CACHE_DIR/llama-campaign.sqlite
    timeout -k 20 -s INT "${LLAMA_CAMPAIGN_SECONDS:-420}" python3 -m engine optimize \
      --shapes "$(python3 bench/llama_proof.py --print-shapes "$@")" --layout tn \
      --budget "$LLAMA_CAMPAIGN_BUDGET" --space library --name llama --db "$llama_db" \
      --out "$OUT/llama-campaign.json" >"$OUT/llama-campaign.log" 2>&1 || status=1
    tail -16 "$OUT/llama-campaign.log"
    cp "$llama_db" "$OUT/llama-campaign.sqlite"
    LLAMA_DB=${LLAMA_DB:-$llama_db} LLAMA_CAMPAIGN=${LLAMA_CAMPAIGN:-llama}
  fi
  zip=${LLAMA_BUNDLE:-$OUT/llama-bundle.zip}
  if [[ -z ${LLAMA_BUNDLE:-} ]]; then
    python3 - "${LLAMA_DB:-bench/results/grid64/campaign.sqlite}" "${LLAMA_CAMPAIGN:-}" "$zip" \
        <<'PY' || status=1
import sys
from pathlib import Path
sys.path.insert(0, "bench")
from bundle_check import choose_campaign, write_zip
db, given, out = Path(sys.argv[1]), sys.argv[2] or None, Path(sys.argv[3])
chosen = choose_campaign(db, given)
if chosen["name"] is None:
    sys.exit(f"error: {chosen['error']}")
error = write_zip(db, chosen["name"], out, include_slower=False)
sys.exit(f"error: {error}" if error else 0)
PY
  fi
  # the bundle's C++ ops and pinned-algorithm path on this GPU first (LLAMA_TESTS=0 skips)
  if [[ ${LLAMA_TESTS:-1} != 0 ]]; then
    python3 -m pytest -q -o addopts="" -p no:cacheprovider -m gpu \
      tests/engine/publish/test_bundle_native.py >"$OUT/llama-gpu-tests.log" 2>&1 || status=1
    tail -3 "$OUT/llama-gpu-tests.log"
  fi
  # the proof's rows so far stay in the device cache: a call cut by LLAMA_SECONDS goes on from
  # them on a warm machine (LLAMA_RESUME=0: start afresh)
  proof_kept=$ENGINE_CACHE_DIR/llama_proof.json
  [[ ${LLAMA_RESUME:-1} == 0 ]] && rm -f "$proof_kept"
  timeout -k 10 "${LLAMA_SECONDS:-480}" python3 bench/llama_proof.py --zip "$zip" \
    --out "$OUT/llama" --resume "$proof_kept" "$@" >"$OUT/llama.log" 2>&1 || status=1
  cp "$OUT/llama/llama_proof.json" "$proof_kept" 2>/dev/null
  tail -60 "$OUT/llama.log"
fi
if [[ $stage == holdout ]]; then  # issue 41's acceptance: the 24 unmeasured shapes HOLDOUT_SEED
  # draws (bench/holdout.py: 6 a class), searched as a user would (engine optimize, NN, budget 32,
  # default proposers, finals with Inductor and TunableOp); the campaign resumes from the device
  # cache on a warm machine (a call cut by HOLDOUT_SECONDS goes on), and once its finals are in,
  # the per-class summary
  # a fresh machine goes on from the state an earlier one sent back (the campaign's db, its saved
  # finals, the policy it has learnt so far, the shapes drawn), from HOLDOUT_FROM: a folder, such
  # as a committed bench/results/*-holdout-<seed>/state (default .carry/holdout). Its shapes, not
  # a new draw: once a holdout's results are committed, the draw leaves their shapes out.
  from=${HOLDOUT_FROM:-.carry/holdout}
  : "${HOLDOUT_SEED:?HOLDOUT_SEED, chosen after the method is frozen}"
  if [[ -f $from/holdout-shapes.txt ]]; then
    shapes=$(cat "$from/holdout-shapes.txt")
  else
    shapes=$(python3 bench/holdout.py draw --seed "$HOLDOUT_SEED")
  fi
  echo "$shapes" >"$OUT/holdout-shapes.txt"
  holdout_db=$ENGINE_CACHE_DIR/holdout.sqlite
  if [[ -d $from && ! -f $holdout_db ]]; then
    cp "$from/holdout.sqlite" "$ENGINE_CACHE_DIR/" || status=1
    cp "$from/holdout.finals.json" "$ENGINE_CACHE_DIR/" 2>/dev/null
    mkdir -p "$ENGINE_CACHE_DIR/policy"
    cp "$from/sm_90.pt" "$ENGINE_CACHE_DIR/policy/" 2>/dev/null
    echo "holdout: resumed from $from ($(ls "$from" | tr '\n' ' '))"
  fi
  timeout -k 20 -s INT "${HOLDOUT_SECONDS:-540}" python3 -m engine optimize --shapes "$shapes" \
    --layout nn --budget 32 --name "holdout-$HOLDOUT_SEED" --db "$holdout_db" \
    --out "$OUT/holdout.json" >"$OUT/holdout.log" 2>&1 || status=1
  tail -20 "$OUT/holdout.log"
  cp "$holdout_db" "$OUT/holdout.sqlite"
  cp "$ENGINE_CACHE_DIR/holdout.finals.json" "$ENGINE_CACHE_DIR/policy/sm_90.pt" "$OUT/" 2>/dev/null
  if [[ -f $OUT/holdout.json ]]; then
    # the finals saved so far, also when this call's limit cut the campaign during them
    saved=()
    [[ -f $OUT/holdout.finals.json ]] && saved=(--saved-finals "$OUT/holdout.sqlite")
    python3 bench/holdout.py summary "$OUT/holdout.json" "${saved[@]}" \
      --out "$OUT/holdout-summary.json" || status=1
  fi
  pack_device_kernels
fi
# PACK_OUT=1: everything under $OUT but the kernel pack travels back as one results.tar.xz (the
# device returns at most 8 files)
if [[ -n ${PACK_OUT:-} ]]; then
  (cd "$OUT" && find . -mindepth 1 -maxdepth 1 ! -name 'kernels-device.tar.xz' ! -name 'results*.tar.xz' \
    -printf '%P\n' | tar -cJf "results-$stage.tar.xz" --files-from=- --remove-files)
fi
exit $status
