"""Why the offline protocol disagrees with the device protocol (bench/NOTES.md §25), in one GPU
call: an sm90 and an sm80 kernel of the library beside cuBLASLt-autotune at four shapes (a
2^34 mid-size one, a long-K one, a launch-bound one and a compute-bound control), each timed in
the device protocol and twice in the offline one, with the timed checks (operand sets rotating)
and without them (one operand set, as before the checks), in alternating order from shape to
shape, all in one process.

    python3 bench/offline_device.py [--shapes 2048x2048x4096,512x256x8192,...]
        [--offline-iterations 200] [--device-seconds 1.5] [--heat-seconds 1]
        [--deadline 200] [--out DIR]

Per shape, kernel and condition: the speedup over cuBLASLt-autotune in device time (medians),
offline (means, the protocol's statistic, and medians; both offline runs), CUDA-L2's event time
inside the offline run; each runner's launch host time in the offline calls and with the GPU
busy, on rotating buffers and on one repeated set; NVML's power and SM clock over each protocol.
What each hypothesis predicts for these numbers is in NOTES §25. Writes offline_device.json and
offline_device.txt (the table, also printed) under --out.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.problem import Layout, Problem  # noqa: E402

BASELINE = "cublaslt_autotune_nn"
SHAPES = "2048x2048x4096,512x256x8192,1024x1024x1024,8192x8192x8192"
# Two kernels a shape: the sm90 family's launcher keeps its initialised CUTLASS operator for
# the last buffers (a pointer-keyed cache), the sm80 family's keeps nothing per buffer; the
# first valid of each family's list is used. All of them are in the NN library.
KERNELS = {
    "sm90": (
        "hgemm_sm90_128x128x64_c1x1x1_sauto_nn_pingpong_epitma_persistent_rheuristic_sw1",
        "hgemm_sm90_64x64x128_c1x1x1_sauto_nn_pingpong_epitma_persistent_rheuristic_sw1",
    ),
    "sm80": (
        "hgemm_sm80_128x128x32_w2x2_s3_nn_sw1_splitk1",
        "hgemm_sm80_32x64x64_w1x2_s4_nn_sw1_splitk8",
    ),
}
# the smaller tiles where the large ones would leave most of the 132 SMs idle
SMALL_TILES_BELOW_TILES = 66
CONDITIONS = ("checks", "no_checks")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, help="MxNxK (NN), comma separated")
    parser.add_argument("--offline-iterations", type=int, default=200)
    parser.add_argument("--device-seconds", type=float, default=1.5)
    parser.add_argument("--heat-seconds", type=float, default=1.0)
    parser.add_argument("--deadline", type=float, default=200.0, help="no shape starts after")
    parser.add_argument("--seed", type=int, default=2040)
    parser.add_argument("--out", type=Path, default=Path("out"))
    args = parser.parse_args(argv)
    args.problems = [Problem.parse(s.strip(), "nn") for s in args.shapes.split(",") if s.strip()]
    if not args.problems:
        parser.error("--shapes names no shape")
    if args.offline_iterations < 20:
        parser.error("--offline-iterations must be at least 20 (the checks sample up to 9)")
    return args


def kernel_names(problem: Problem, valid: dict[str, bool]) -> dict[str, str]:
    """Per family, the kernel to time at ``problem``: the large tile unless it leaves most SMs
    idle, else the next valid one; ``valid`` says which names the family's rule allows here."""
    tiles_128 = math.ceil(problem.m / 128) * math.ceil(problem.n / 128)
    chosen = {}
    for family, names in KERNELS.items():
        order = list(names) if tiles_128 >= SMALL_TILES_BELOW_TILES else list(reversed(names))
        usable = [n for n in order if valid.get(n)]
        if usable:
            chosen[family] = usable[0]
    return chosen


def ratio(baseline: float | None, kernel: float | None) -> float | None:
    """Speedup over the baseline: its time over the kernel's (None when either is missing)."""
    if not baseline or not kernel:
        return None
    return baseline / kernel


def condition_summary(raw: dict[str, Any], families: Sequence[str]) -> dict[str, Any]:
    """One condition's speedups and host times per kernel family, from the raw protocol
    results (ProtocolResult.to_dict of the device run and of each offline run) and the host
    probe."""
    device = raw["device"]["stats"]
    offline_runs = raw["offline"]
    out: dict[str, Any] = {}
    for family in families:
        if family not in device:
            continue
        row: dict[str, Any] = {
            "device": ratio(device[BASELINE]["median"], device[family]["median"]),
            "offline_mean": [
                ratio(r["stats"][BASELINE]["mean"], r["stats"][family]["mean"])
                for r in offline_runs
            ],
            "offline_median": [
                ratio(r["stats"][BASELINE]["median"], r["stats"][family]["median"])
                for r in offline_runs
            ],
            "offline_event": [
                ratio(r["event_s"][BASELINE], r["event_s"][family]) for r in offline_runs
            ],
        }
        for name, key in ((family, "kernel"), (BASELINE, "cublaslt")):
            row[f"{key}_launch_offline_us"] = us(
                statistics.median(r["launch_host_s"][name] for r in offline_runs)
            )
            row[f"{key}_probe_rotating_us"] = us(raw["host_overhead"]["rotating"].get(name))
            row[f"{key}_probe_same_us"] = us(raw["host_overhead"]["same_buffers"].get(name))
        row["rejected"] = sorted(
            {n for r in [raw["device"], *offline_runs] for n in r.get("rejections", {})}
        )
        out[family] = row
    out["clock_mhz"] = {
        protocol: (raw.get("power", {}).get(protocol) or {}).get("sm_clock_mhz", {}).get("mean")
        for protocol in ("device", "offline")
    }
    return out


def us(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e6, 2)


def fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_pair(values: Sequence[float | None]) -> str:
    return "/".join(fmt(v) for v in values)


TABLE_HEADER = (
    "| shape | kernel | checks | device | offline mean (2 runs) | offline median | "
    "offline event | launch µs kernel / cuBLASLt (offline) | probe µs kernel rotating / same | "
    "probe µs cuBLASLt rotating / same | SM MHz device / offline |"
)


def table(shapes: Sequence[dict[str, Any]]) -> str:
    """One row per shape, kernel and condition: speedups over cuBLASLt-autotune and host times."""
    lines = [TABLE_HEADER, "|" + " --- |" * TABLE_HEADER.count(" | ") + " --- |"]
    for shape in shapes:
        for family, name in shape["kernels"].items():
            for condition in CONDITIONS:
                summary = shape["conditions"].get(condition, {})
                row = summary.get(family)
                if row is None:
                    continue
                clock = summary.get("clock_mhz", {})
                mark = f" REJECTED {','.join(row['rejected'])}" if row["rejected"] else ""
                lines.append(
                    f"| {shape['problem']} | {family} `{name}`{mark} | "
                    f"{'on' if condition == 'checks' else 'off'} | {fmt(row['device'])} | "
                    f"{fmt_pair(row['offline_mean'])} | {fmt_pair(row['offline_median'])} | "
                    f"{fmt_pair(row['offline_event'])} | "
                    f"{fmt(row['kernel_launch_offline_us'], 1)} / "
                    f"{fmt(row['cublaslt_launch_offline_us'], 1)} | "
                    f"{fmt(row['kernel_probe_rotating_us'], 1)} / "
                    f"{fmt(row['kernel_probe_same_us'], 1)} | "
                    f"{fmt(row['cublaslt_probe_rotating_us'], 1)} / "
                    f"{fmt(row['cublaslt_probe_same_us'], 1)} | "
                    f"{fmt(clock.get('device'), 0)} / {fmt(clock.get('offline'), 0)} |"
                )
    return "\n".join(lines)


def geomeans(shapes: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per family and condition, the geomean over shapes of the device and first offline-mean
    speedups."""
    out: dict[str, dict[str, float | None]] = {}
    for family in KERNELS:
        for condition in CONDITIONS:
            rows = [
                s["conditions"][condition][family]
                for s in shapes
                if family in s["conditions"].get(condition, {})
            ]
            for key, pick in (("device", lambda r: r["device"]), ("offline", first_offline)):
                values = [v for v in map(pick, rows) if v]
                geo = math.exp(statistics.fmean(map(math.log, values))) if values else None
                out.setdefault(f"{family}_{condition}", {})[key] = geo
    return out


def first_offline(row: dict[str, Any]) -> float | None:
    return row["offline_mean"][0] if row["offline_mean"] else None


# -- the GPU part ---------------------------------------------------------------------------


# cuda.h's enumerations for one fp16 operand tile as the sm90 kernels' TMA loads it
TMA_FLOAT16, TMA_SWIZZLE_128B, TMA_L2_PROMOTION_128B = 6, 3, 2


def tma_descriptor_costs(lib: Any, address: int, rows: int, cols: int, calls: int = 1000) -> dict:
    """Host seconds per call of what an sm90 launcher's re-initialisation does three times
    (one TMA descriptor encoded for A, B and D: ``cuTensorMapEncodeTiled``) and of what could
    stand in for it (``cuTensorMapReplaceAddress``: only the address changes), for a row-major
    fp16 ``rows``×``cols`` matrix at ``address`` in 64×128 boxes; a failed call is recorded."""
    storage = ctypes.create_string_buffer(128 + 64)
    descriptor = ctypes.c_void_p((ctypes.addressof(storage) + 63) & ~63)  # 64-byte aligned
    dims = (ctypes.c_uint64 * 2)(cols, rows)
    strides = (ctypes.c_uint64 * 1)(cols * 2)
    box = (ctypes.c_uint32 * 2)(64, 128)
    steps = (ctypes.c_uint32 * 2)(1, 1)

    def encode() -> int:
        return lib.cuTensorMapEncodeTiled(
            descriptor, ctypes.c_int(TMA_FLOAT16), ctypes.c_uint32(2), ctypes.c_void_p(address),
            dims, strides, box, steps, ctypes.c_int(0), ctypes.c_int(TMA_SWIZZLE_128B),
            ctypes.c_int(TMA_L2_PROMOTION_128B), ctypes.c_int(0),
        )  # fmt: skip

    def replace() -> int:
        return lib.cuTensorMapReplaceAddress(descriptor, ctypes.c_void_p(address))

    out: dict[str, Any] = {}
    for key, call in (("encode_s", encode), ("replace_s", replace)):
        status = call()
        if status != 0:
            out[key] = None
            out.setdefault("errors", {})[key] = f"CUresult {status}"
            continue
        started = time.perf_counter()
        for _ in range(calls):
            call()
        out[key] = (time.perf_counter() - started) / calls
    return out


def build_kernels(problems: Sequence[Problem]) -> tuple[dict[str, dict[str, str]], dict]:
    """The kernels of each problem ({problem key: {family: name}}) and their libraries
    ({name: path}), compiled now unless the cache (carried: bench/device/pack_kernels.sh) has
    them."""
    from engine.codegen.library import library
    from engine.compilation.compile import compile_configs
    from engine.gpu import cuda_driver

    wanted = {n for names in KERNELS.values() for n in names}
    configs = {
        c.name: c for family in KERNELS for c in library(family, Layout.NN) if c.name in wanted
    }
    chosen = {
        p.key: kernel_names(p, {n: bool(c.is_valid(p)) for n, c in configs.items()})
        for p in problems
    }
    needed = [configs[n] for n in sorted({n for k in chosen.values() for n in k.values()})]
    results = compile_configs(needed, jobs=len(needed), target_arch=cuda_driver.local_arch())
    libraries = {}
    for config, result in zip(needed, results, strict=True):
        if result.ok:
            libraries[config.name] = result.library
        else:
            log(f"{config.name}: build failed: {(result.error or '')[:300]}")
    return chosen, libraries


def measure_condition(problem, kernels, libraries, shim, *, checks: bool, args, cache) -> dict:
    """One condition at one shape: a fresh bench, the runners, the host probe, the heat-up,
    the device protocol and the offline protocol twice (NVML sampled over each)."""
    from engine.gpu import power
    from engine.gpu.runtime import KernelLibrary
    from engine.timing import baselines
    from engine.timing.protocols import Bench

    bench = Bench(problem, seed=args.seed, timed_checks=checks)
    plan, algo, report = baselines.autotune(bench, shim, Layout.NN, cache=cache)
    runners = [
        baselines.cublaslt_runner(shim, plan, algo, Layout.NN, "cublaslt_autotune", BASELINE)
    ]
    for family, name in kernels.items():
        if name in libraries:
            runners.append(
                baselines.candidate_runner(KernelLibrary(libraries[name]), problem, family)
            )
    bench.warm_up(runners)
    overhead = bench.host_overhead(runners)
    bench.heat_up(runners, args.heat_seconds)
    reader = power.open_reader()
    raw: dict[str, Any] = {"host_overhead": overhead, "power": {}, "autotune": report}

    def sampled(protocol: str, run):
        if reader is None:
            return run()
        with power.Sampler(reader) as sampler:
            result = run()
        raw["power"].setdefault(protocol, sampler.summary())
        return result

    seconds = args.device_seconds
    raw["device"] = sampled(
        "device", lambda: bench.device(runners, max_seconds=seconds, min_seconds=seconds)
    ).to_dict()
    raw["offline"] = [
        sampled(
            "offline", lambda: bench.offline(runners, iterations=args.offline_iterations)
        ).to_dict()
        for _ in range(2)
    ]
    for result in [raw["device"], *raw["offline"]]:
        timed = result.pop("timed_checks", None)  # with the records of every sampled call
        if timed is not None:
            result["checks_cost"] = timed["cost"]
    return raw


def descriptor_costs() -> dict[str, Any]:
    """:func:`tma_descriptor_costs` on this GPU's driver, for a 4096×4096 operand."""
    import torch

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"errors": {"libcuda": str(exc)}}
    operand = torch.empty(4096, 4096, dtype=torch.float16, device="cuda")
    return tma_descriptor_costs(lib, operand.data_ptr(), 4096, 4096)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    from engine.config import load as load_config
    from engine.gpu.environment import collect
    from engine.timing.measure import load_shim

    chosen, libraries = build_kernels(args.problems)
    log(f"kernels ready ({len(libraries)}) after {time.monotonic() - started:.0f} s")
    shim = load_shim(load_config())
    environment = collect(cublaslt_version=shim.cublaslt_version).to_dict()
    tma = descriptor_costs()
    log(f"TMA descriptor per call: {tma}")
    cache = args.out / "cublaslt_autotune.json"
    shapes: list[dict[str, Any]] = []
    skipped = []
    for index, problem in enumerate(args.problems):
        if time.monotonic() - started > args.deadline:
            skipped.append(problem.key)
            continue
        order = CONDITIONS if index % 2 == 0 else tuple(reversed(CONDITIONS))
        raw = {
            condition: measure_condition(
                problem,
                chosen[problem.key],
                libraries,
                shim,
                checks=condition == "checks",
                args=args,
                cache=cache,
            )
            for condition in order
        }
        families = [f for f, n in chosen[problem.key].items() if n in libraries]
        shape = {
            "problem": problem.key,
            "kernels": {f: chosen[problem.key][f] for f in families},
            "order": list(order),
            "conditions": {c: condition_summary(raw[c], families) for c in order},
            "raw": raw,
        }
        shapes.append(shape)
        log(f"{problem.key} done at {time.monotonic() - started:.0f} s")
    text = table(shapes)
    out = {
        "what": "offline vs device protocol: sm90 and sm80 kernels vs cuBLASLt-autotune, with "
        "and without the timed checks (bench/NOTES.md §25)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.monotonic() - started, 1),
        "args": {k: v for k, v in vars(args).items() if k not in ("out", "problems")},
        "environment": environment,
        "tma_descriptor": tma,
        "skipped": skipped,
        "geomeans": geomeans(shapes),
        "shapes": shapes,
    }
    (args.out / "offline_device.json").write_text(json.dumps(out, indent=1, default=str))
    (args.out / "offline_device.txt").write_text(text + "\n")
    print(text)
    print(json.dumps(out["geomeans"], indent=1))
    log(f"wrote {args.out}/offline_device.json in {out['seconds']} s; skipped {skipped or 'none'}")
    return 0 if shapes and not skipped else 1


if __name__ == "__main__":
    sys.exit(main())
