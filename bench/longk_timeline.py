"""Where a longk kernel's time goes: each CTA stamps the global timer at its phase boundaries
(entry; barriers initialised; first K tile landed; main loop done; and, in a pull kernel, partial
tile parked and its share summed and stored; end) and the SM clock beside it, and the script
reports, per shape, the median over calls of each phase and of the launch's spread across CTAs.
GPU only.

    python3 bench/longk_timeline.py
        [--pairs SHAPE/TILE_N/STAGES/SPLITS/SWAP[/CTAS[/GROUPS[/MC[/REDUCE]]]],...]
        [--reps 50] [--out timeline.json] [--rewrites relaxed_tail] [--compile-only [--jobs N]]

The probe is the config's own rendered source with stamps added at fixed anchors (the script
fails if an anchor is missing, so a template change cannot silently move a phase), built through
the engine's compile cache; each call runs after the L2 has been zeroed through a 256 MiB buffer,
as the device protocol does, with its event time beside the stamps. The stamps cost a few global
stores per CTA at the phase boundaries; the event times say how much they moved the kernel
against the unprobed build, timed in the same loop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# each shape's fastest longk config on the H100 (bench/results/2026-12-06-h100-longk-groups)
DEFAULT_PAIRS = ",".join(
    (
        "128x128x16384/64/8/16/0",
        "512x256x8192/128/8/4/0",
        "256x256x8192/128/8/8/0",
        "128x256x12288/64/8/8/0",
        "64x512x16384/64/8/8/0",
        "256x128x4096/64/6/8/0",
        "128x128x1024/64/8/16/0",  # the first one's fixed costs: one K tile a CTA
        "64x512x16384/64/8/8/0/0/1/2",  # the fifth one's tiles in pairs sharing A's loads
        # the first one with one knob changed: clusters of 8 and 4, 128 CTAs, deeper stages
        "128x128x16384/64/8/8/0",
        "128x128x16384/64/8/4/0",
        "128x128x16384/32/8/16/0",
        "128x128x16384/64/12/16/0",
        "128x128x1024/64/8/8/0",
        "128x128x1024/64/8/4/0",
    )
)
PHASES = ("entry", "init", "first_tile", "loop_done", "parked", "reduced", "end")
MAX_CTAS = 1024  # the stamps' room; the launches here have at most 256
SLOTS = 2 * len(PHASES)  # a global-timer stamp and an SM-clock stamp per phase

PROBE_HEADER = f"""\
__device__ unsigned long long gemmforge_probe_stamps[{MAX_CTAS} * {SLOTS + 1}];
__device__ __forceinline__ unsigned long long probe_globaltimer() {{
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}}
"""
PROBE_SETUP = f"""\
  const int probe_cta = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  unsigned long long* probe = gemmforge_probe_stamps + probe_cta * {SLOTS + 1};
  if (threadIdx.x == 0 && probe_cta < {MAX_CTAS}) {{
    unsigned smid;
    asm volatile("mov.u32 %0, %smid;" : "=r"(smid));
    probe[{SLOTS}] = smid;
  }}
"""
PROBE_READ = f"""
extern "C" int gemmforge_probe_read(unsigned long long* host, int count) {{
  if (count > {MAX_CTAS} * {SLOTS + 1}) return int(cudaErrorInvalidValue);
  return int(cudaMemcpyFromSymbol(host, gemmforge_probe_stamps,
                                  size_t(count) * sizeof(unsigned long long)));
}}
"""


def stamp(phase: str) -> str:
    """The statement that stamps ``phase`` (thread 0 of the CTA, a consumer thread)."""
    index = PHASES.index(phase)
    return (
        f"if (threadIdx.x == 0 && probe_cta < {MAX_CTAS}) {{ probe[{2 * index}] = "
        f"probe_globaltimer(); probe[{2 * index + 1}] = clock64(); }}\n"
    )


FINAL_BARRIER = (
    "  cluster.sync();  // the peers' shared memory stays alive until every CTA has read it\n"
)
# Source rewrites timed beside the plain build (``--rewrites``), each the candidate change of a
# fixed cost: ``relaxed_tail`` ends the pull reduction with a relaxed cluster arrival. The
# default arrival releases at cluster scope, which puts a GPU-wide memory barrier (MEMBAR.ALL.GPU:
# wait for this thread's stores of C to be acknowledged) in front of it; the barrier is there only
# to keep each CTA's shared memory alive until its peers have read it, and every read has been
# consumed by the stores issued before the arrival.
REWRITES = {
    "relaxed_tail": (
        FINAL_BARRIER,
        '  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");\n'
        '  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");\n',
    ),
}


def rewritten(source: str, rewrite: str) -> str:
    """``source`` with REWRITES[rewrite] applied; ValueError if its anchor is not there once."""
    anchor, text = REWRITES[rewrite]
    if source.count(anchor) != 1:
        raise ValueError(f"{rewrite}: anchor {anchor!r} occurs {source.count(anchor)} times")
    return source.replace(anchor, text)


# (anchor in the rendered source, where, the text put before or after it, whether the anchor may
# be absent); each anchor occurs once, but the pull reduction's two (its cluster barriers) are not
# in push and send kernels, whose reduction is then one phase, the main loop's end to the kernel's
INSERTIONS = (
    ("namespace cg = cooperative_groups;\n", "after", PROBE_HEADER, False),
    (
        "  const uint32_t data = smem_addr(smem);\n",
        "after",
        PROBE_SETUP + "  " + stamp("entry"),
        False,
    ),
    ("\n  float acc[kTileQ / 2];\n", "before", "\n  " + stamp("init").rstrip("\n"), False),
    (
        "      mbar_wait(full + 8 * s, (i / kStages) & 1);\n",
        "after",
        "      if (i == 0) " + stamp("first_tile"),
        False,
    ),
    ("    wgmma_wait<0>();\n  }\n", "after", "  " + stamp("loop_done"), False),
    (
        "  cluster.sync();  // every split's partial tile is parked\n",
        "after",
        "  " + stamp("parked"),
        True,
    ),
    (FINAL_BARRIER, "before", "  " + stamp("reduced"), True),
    ("}\n\n// A 2-D tensor map over a row-major operand", "before", "  " + stamp("end"), False),
)


def probe_source(source: str) -> str:
    """``source`` (a longk kernel) with the stamps added; ValueError if an anchor that must be
    there is missing, or an anchor is not unique."""
    for anchor, where, text, optional in INSERTIONS:
        if optional and anchor not in source:
            continue
        if source.count(anchor) != 1:
            raise ValueError(f"anchor {anchor!r} occurs {source.count(anchor)} times")
        source = source.replace(anchor, anchor + text if where == "after" else text + anchor)
    return source + PROBE_READ


def sm_clock_ghz() -> float:
    """The SM clock under load, from an event-timed spin of a known number of cycles."""
    import torch

    cycles = 20_000_000
    torch.cuda._sleep(cycles)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return cycles / (start.elapsed_time(end) * 1e6)


def phase_summary(stamps: list[list[int]], clock_ghz: float) -> dict[str, float]:
    """One call's phases in µs from its CTAs' stamps: the launch's spread (last CTA's entry less
    the first's), the whole span (last end less first entry), and per phase the median over CTAs
    of its SM-clock duration; a phase not every CTA stamped is passed over (its neighbours join)."""
    # the phases every CTA stamped (a push or send kernel has no pull barriers to stamp)
    stamped = [i for i in range(len(PHASES)) if all(row[2 * i] for row in stamps)]
    timers = [[row[2 * i] for i in stamped] for row in stamps]
    clocks = [[row[2 * i + 1] for i in stamped] for row in stamps]
    summary = {
        "launch_spread_us": (max(t[0] for t in timers) - min(t[0] for t in timers)) / 1e3,
        "span_us": (max(t[-1] for t in timers) - min(t[0] for t in timers)) / 1e3,
        "end_spread_us": (max(t[-1] for t in timers) - min(t[-1] for t in timers)) / 1e3,
    }
    for i in range(1, len(stamped)):
        durations = [(c[i] - c[i - 1]) / (clock_ghz * 1e3) for c in clocks]
        summary[f"{PHASES[stamped[i - 1]]}->{PHASES[stamped[i]]}_us"] = statistics.median(durations)
    summary["sms"] = len({row[-1] for row in stamps})
    return summary


def median_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in rows), 3) for key in rows[0]}


def pair_error(pair: str) -> str | None:
    """Why ``pair`` cannot be timed here (a malformed pair, a config invalid for its shape, or
    one that needs a workspace), or None."""
    from bench.longk_profile import config_of
    from engine.problem import Problem

    try:
        shape, config = config_of(pair)
        problem = Problem.parse(shape)
    except ValueError as error:
        expected = "SHAPE/TILE_N/STAGES/SPLITS/SWAP[/CTAS[/GROUPS[/MC[/REDUCE]]]]"
        return f"{pair}: {error} (expected {expected})"
    if config.groups > 1:
        return f"{pair}: groups configs need a workspace; the timeline times one cluster a tile"
    if not (verdict := config.is_valid(problem)):
        return f"{pair}: {verdict.reason}"
    return None


def launch(kernel: Any, problem: Any, operands: tuple[Any, Any, Any], stream: Any) -> int:
    """One launch of ``kernel`` (a KernelLibrary) on torch tensors A, B, C; its error code."""
    a, b, c = operands
    return kernel.launch(
        a.data_ptr(),
        b.data_ptr(),
        c.data_ptr(),
        problem.m,
        problem.n,
        problem.k,
        0,
        stream.cuda_stream,
    )


def build(
    pairs: list[str], rewrites: tuple[str, ...] = (), jobs: int | None = None
) -> list[tuple[str, Any, dict[str, Any]]]:
    """Per pair: (shape, config, {"plain", "probed", each rewrite that applies to it: its
    CompileResult}), every build at once so that the machine's cores share them (no GPU needed).
    A rewrite applies where its anchor is (relaxed_tail: pull kernels)."""
    from bench.longk_profile import config_of
    from engine.compilation.compile import compile_configs, compile_many

    configs = [config_of(pair) for pair in pairs]
    applies = [[r for r in rewrites if REWRITES[r][0] in c.render()] for _, c in configs]
    plains = compile_configs([config for _, config in configs], jobs=jobs, target_arch="sm_90")
    sources = [probe_source(config.render()) for _, config in configs]
    sources += [
        rewritten(config.render(), r)
        for (_, config), names in zip(configs, applies, strict=True)
        for r in names
    ]
    built = iter(compile_many(sources, jobs=jobs, archs=("sm_90a",)))
    probes = [next(built) for _ in configs]
    rows = zip(configs, plains, probes, applies, strict=True)
    return [
        (shape, config, {"plain": plain, "probed": probed, **{r: next(built) for r in names}})
        for (shape, config), plain, probed, names in rows
    ]


def run(pairs: list[str], reps: int, rewrites: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    import ctypes

    import torch

    from engine.gpu.runtime import KernelLibrary
    from engine.problem import Problem

    clock_ghz = sm_clock_ghz()
    stream = torch.cuda.current_stream()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    results = []
    for shape, config, builds in build(pairs, rewrites):
        problem = Problem.parse(shape)
        probed = builds["probed"]
        if failed := [result for result in builds.values() if not result.ok]:
            results.append({"shape": shape, "config": config.name, "error": failed[0].error})
            continue
        kernels = {name: KernelLibrary(str(result.library)) for name, result in builds.items()}
        reader = ctypes.CDLL(str(probed.library)).gemmforge_probe_read
        reader.argtypes = (ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int)
        a = torch.randn(problem.m, problem.k, device="cuda").half()
        b = torch.randn(problem.k, problem.n, device="cuda").half()
        c = torch.empty(problem.m, problem.n, device="cuda", dtype=torch.float16)
        ctas = config.ctas(problem)
        event_us: dict[str, list[float]] = {name: [] for name in kernels}
        phases = []

        for rep in range(reps + 3):
            for name, kernel in kernels.items():
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record(stream)
                error = launch(kernel, problem, (a, b, c), stream)
                end.record(stream)
                torch.cuda.synchronize()
                assert error == 0, error
                if rep < 3:
                    continue
                event_us[name].append(start.elapsed_time(end) * 1e3)
                if name == "probed":
                    count = ctas * (SLOTS + 1)
                    host = (ctypes.c_ulonglong * count)()
                    assert reader(host, count) == 0
                    stamps = [list(host[i : i + SLOTS + 1]) for i in range(0, count, SLOTS + 1)]
                    phases.append(phase_summary([s for s in stamps if s[0]], clock_ghz))
        reference = a.float() @ b.float()
        for name, kernel in kernels.items():  # each build's own sums, into a poisoned C
            c.fill_(float("nan"))
            assert launch(kernel, problem, (a, b, c), stream) == 0
            torch.cuda.synchronize()
            assert torch.allclose(c.float(), reference, rtol=2e-2, atol=2e-1), f"{name}: wrong sums"
        row = {
            "shape": shape,
            "config": config.name,
            "ctas": ctas,
            "sm_clock_ghz": round(clock_ghz, 3),
            "event_us": {k: round(statistics.median(v), 3) for k, v in event_us.items()},
            "phases": median_rows(phases),
        }
        print(json.dumps(row), flush=True)
        results.append(row)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=DEFAULT_PAIRS)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("longk-timeline.json"))
    parser.add_argument(
        "--compile-only", action="store_true", help="build every pair's kernels, then stop"
    )
    parser.add_argument("--jobs", type=int, default=None, help="compile jobs (--compile-only)")
    parser.add_argument(
        "--rewrites",
        default="",
        help=f"comma-separated source rewrites timed beside the plain build: {list(REWRITES)}",
    )
    args = parser.parse_args(argv)
    rewrites = tuple(r for r in args.rewrites.split(",") if r)
    if unknown := [r for r in rewrites if r not in REWRITES]:
        parser.error(f"unknown rewrites {unknown}; known: {list(REWRITES)}")
    pairs = args.pairs.split(",")
    if errors := [e for pair in pairs if (e := pair_error(pair))]:
        parser.error("; ".join(errors))
    if args.compile_only:
        built = [b for _, _, builds in build(pairs, rewrites, args.jobs) for b in builds.values()]
        print(f"{sum(b.ok for b in built)} of {len(built)} timeline kernels built")
        return 0 if all(b.ok for b in built) else 1
    rows = run(pairs, args.reps, rewrites)
    args.out.write_text(json.dumps({"rows": rows, "phases": PHASES}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
