"""The user's proof: a kernel bundle against what a PyTorch user already has, on a Llama model.

    python3 bench/llama_proof.py --zip BUNDLE.zip --out DIR [--ms 1,16,128,1024,4096]
        [--hidden 4096 --intermediate 14336 --heads 32 --kv-heads 8]
        [--sides torch,bundle,tunableop,compile] [--parts proj,mlp]

Unpacks and builds the bundle (bench/bundle_overhead.py's steps: its C++ ops, its shim, its
kernels), then for the projections of one decoder layer (q/o: hidden→hidden, k/v: hidden→kv,
gate/up: hidden→intermediate, down: intermediate→hidden; nn.Linear weights, so TN) at each M of
--ms, and for the Llama MLP block down(silu(gate(x)) * up(x)) end to end, times each side:

- torch: torch.nn.functional.linear (torch.matmul's cuBLAS/cuBLASLt path, no tuning);
- torch_again: the same call as a side of its own, so that each mode's table says how far two
  identical sides differ (the noise a ratio must exceed to be a win or a loss);
- bundle: gemmforge_bundle.linear, the call the bundle's README gives for the least host time
  (its op torch.ops.gemmforge.hgemm_linear.default, or the Python path without the extension):
  the bundle's kernel, its pinned cuBLASLt algorithm, or torch.matmul, whichever its table holds
  for that M;
- tunableop: torch.nn.functional.linear with PyTorch's TunableOp on, each shape tuned before it is
  timed (tuning then off, so nothing is tuned while timed or captured);
- compile: torch.compile(mode="max-autotune-no-cudagraphs") of the same projection or block
  (Inductor's max-autotune choice of Triton templates or cuBLAS; without Inductor's own CUDA
  graphs, so that the graph mode below captures every side the same way).

Per side: host µs (enqueueing one call while the GPU sleeps), eager µs (back-to-back calls, wall
time per call) and graph µs (device time per call, calls captured in a CUDA graph, the sides'
graphs replayed alternately). Writes DIR/llama_proof.json after every row (a cut-short run keeps
what it did) with the environment (GPU, driver, torch, CUDA, cuBLASLt) and a summary: per mode the
bundle over torch.matmul and over each other side, per projection shape and their geomean, the
largest host-time difference to torch.matmul, and the MLP block's. Prints one table. Claims
nothing: the JSON holds the times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

REPORT = "llama_proof.json"
SIDES = ("torch", "torch_again", "bundle", "tunableop", "compile")
NOISE_SIDE = "torch_again"  # torch's call once more: what a side differs from itself, per mode
MODES = ("graph", "eager", "host")  # graph: device µs; eager: wall µs; host: enqueue µs
COMPILE_MODE = "max-autotune-no-cudagraphs"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/llama_proof.py")
    parser.add_argument("--zip", type=Path, help="a bundle (python -m engine bundle)")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--print-shapes",
        action="store_true",
        help="print the projections' MxNxK at each M (comma-separated, TN: nn.Linear's weight) "
        "for `engine optimize --shapes`, and stop",
    )
    parser.add_argument("--ms", default="1,16,128,1024,4096", help="comma-separated Ms (tokens)")
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=14336)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--sides", default=",".join(SIDES), help=f"a subset of {SIDES}")
    parser.add_argument("--parts", default="proj,mlp", help="proj, mlp or both")
    parser.add_argument("--host-calls", type=int, default=200, help="calls per host timing")
    parser.add_argument("--calls", type=int, default=20, help="calls per CUDA graph / eager run")
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=20, help="eager runs per median")
    parser.add_argument("--jobs", type=int, default=16, help="nvcc jobs for the bundle's build")
    parser.add_argument("--timeout", type=int, default=480, help="seconds for the build")
    parser.add_argument(
        "--resume",
        type=Path,
        help="an earlier run's llama_proof.json on this GPU: its rows are kept and not measured "
        "again (a run cut short goes on where it stopped)",
    )
    args = parser.parse_args(argv)
    if not args.print_shapes and (args.zip is None or args.out is None):
        parser.error("--zip and --out are needed (unless --print-shapes)")
    unknown = set(sides_of(args)) - set(SIDES)
    if unknown or "torch" not in sides_of(args) or "bundle" not in sides_of(args):
        parser.error(f"--sides: torch and bundle, and any of {SIDES}; not {sorted(unknown)}")
    return args


def sides_of(args: argparse.Namespace) -> list[str]:
    return [s.strip() for s in args.sides.split(",") if s.strip()]


# -- the model's shapes ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Projection:
    """One nn.Linear of the layer: Y (M, n) = X (M, k) · Wᵀ with W (n, k)."""

    names: str  # the projections of this shape, e.g. "q/o"
    n: int
    k: int


def projections(hidden: int, intermediate: int, heads: int, kv_heads: int) -> list[Projection]:
    """The distinct shapes of a Llama decoder layer's projections (q and o share hidden→hidden;
    k and v hidden→kv_heads·head_dim; gate and up hidden→intermediate; down back)."""
    kv = hidden // heads * kv_heads
    shapes: dict[tuple[int, int], list[str]] = {}
    for name, n, k in (
        ("q", hidden, hidden),
        ("k", kv, hidden),
        ("v", kv, hidden),
        ("o", hidden, hidden),
        ("gate", intermediate, hidden),
        ("up", intermediate, hidden),
        ("down", hidden, intermediate),
    ):
        shapes.setdefault((n, k), []).append(name)
    return [Projection("/".join(names), n, k) for (n, k), names in shapes.items()]


# -- timing (the GPU's side; a test double stands in on the CPU) ---------------------------------
class Timer(Protocol):
    def host(self, fn: Callable[[], Any]) -> float: ...
    def eager(self, fn: Callable[[], Any]) -> float: ...
    def graph(self, sides: Mapping[str, Callable[[], Any]]) -> dict[str, float]: ...


class CudaTimer:
    """bench/bundle_overhead.py's three timings."""

    def __init__(self, args: argparse.Namespace) -> None:
        sys.path.insert(0, str(REPO / "bench"))
        import bundle_overhead

        self.timing = bundle_overhead
        self.args = args

    def host(self, fn: Callable[[], Any]) -> float:
        return float(self.timing.host_us(fn, self.args.host_calls)["us"])

    def eager(self, fn: Callable[[], Any]) -> float:
        return float(self.timing.eager_us(fn, self.args.calls, self.args.repeats))

    def graph(self, sides: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
        return self.timing.graph_us(dict(sides), self.args.calls, self.args.replays)


def time_sides(
    sides: Mapping[str, Callable[[], Any]], timer: Timer, errors: dict[str, str]
) -> dict[str, dict[str, float]]:
    """Mode → side → µs per call. A side that fails in a mode is left out of it, its error in
    ``errors`` (a failed capture of all sides at once: each side captured alone instead)."""
    try:
        graph = timer.graph(sides)
    except Exception as exc:  # e.g. a side that cannot be captured
        errors["graph"] = f"{type(exc).__name__}: {exc}"
        graph = {}
        for name, fn in sides.items():
            alone = attempt(
                lambda fn=fn, name=name: timer.graph({name: fn}), f"graph:{name}", errors
            )
            graph.update(alone or {})
    out = {"graph": graph, "eager": {}, "host": {}}
    for mode, measure in (("eager", timer.eager), ("host", timer.host)):
        for name, fn in sides.items():
            value = attempt(lambda fn=fn, measure=measure: measure(fn), f"{mode}:{name}", errors)
            if value is not None:
                out[mode][name] = value
    return out


def attempt(fn: Callable[[], Any], what: str, errors: dict[str, str]) -> Any:
    """``fn()``, or None with its error kept under ``what``."""
    try:
        return fn()
    except Exception as exc:
        errors[what] = f"{type(exc).__name__}: {exc}"
        return None


def max_abs_diffs(
    sides: Mapping[str, Callable[[], Any]], errors: dict[str, str]
) -> dict[str, float]:
    """Each side's largest difference from torch's output (its first call: a compiled side
    compiles, a TunableOp side was tuned before); a side that fails is left out."""
    ref = sides["torch"]().float()
    out = {}
    for name, fn in sides.items():
        diff = attempt(
            lambda fn=fn: float((fn().float() - ref).abs().max()), f"check:{name}", errors
        )
        if diff is not None:
            out[name] = diff
    return out


# -- the sides, on the GPU ------------------------------------------------------------------------
def configure_torch() -> None:
    """Dynamo may recompile the same code for every shape and M measured (its default limit of
    8 would fall back to eager)."""
    import torch

    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):  # fmt: skip
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)


def with_tunableop(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` tuned now by TunableOp (its shapes), then run with TunableOp's choice, not tuning
    (the engine's switch: TunableOp on only around these calls, its results in memory)."""
    from engine.timing.torch_baselines import tunableop

    switch = tunableop()
    switch.tune(fn)

    def tuned() -> Any:
        with switch.on():
            return fn()

    return tuned


def projection_sides(
    p: Projection, m: int, wanted: Sequence[str]
) -> tuple[dict[str, Callable[[], Any]], str | None]:
    """The sides for one projection at one M, and what the bundle's table serves there."""
    import gemmforge_bundle
    import torch
    from torch.nn.functional import linear

    x = torch.randn(m, p.k, device="cuda", dtype=torch.float16)
    w = torch.randn(p.n, p.k, device="cuda", dtype=torch.float16) / math.sqrt(p.k)
    sides: dict[str, Callable[[], Any]] = {
        "torch": lambda: linear(x, w),
        "bundle": lambda: gemmforge_bundle.linear(x, w),
    }
    if NOISE_SIDE in wanted:
        sides[NOISE_SIDE] = lambda: linear(x, w)
    if "tunableop" in wanted:
        sides["tunableop"] = with_tunableop(lambda: linear(x, w))
    if "compile" in wanted:
        compiled = torch.compile(lambda a, b: linear(a, b), mode=COMPILE_MODE, dynamic=False)
        sides["compile"] = lambda: compiled(x, w)
    return sides, gemmforge_bundle.kernel_for(m, p.n, p.k, "tn")


def mlp_sides(
    m: int, hidden: int, intermediate: int, wanted: Sequence[str]
) -> tuple[dict[str, Callable[[], Any]], dict[str, str | None]]:
    """The sides for the MLP block at one M, and what the bundle serves for its projections."""
    import gemmforge_bundle
    import torch
    from torch import nn

    class Mlp(nn.Module):
        """Llama's feed-forward block: down(silu(gate(x)) * up(x)), no biases."""

        def __init__(self, linear: Callable[..., Any]) -> None:
            super().__init__()
            self.gate = nn.Linear(hidden, intermediate, bias=False)
            self.up = nn.Linear(hidden, intermediate, bias=False)
            self.down = nn.Linear(intermediate, hidden, bias=False)
            self.linear = linear

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = nn.functional.silu(self.linear(x, self.gate.weight))
            return self.linear(h * self.linear(x, self.up.weight), self.down.weight)

    torch.manual_seed(0)
    plain = Mlp(nn.functional.linear).cuda().half().eval()
    ours = Mlp(gemmforge_bundle.linear).cuda().half().eval()
    ours.load_state_dict(plain.state_dict())
    x = torch.randn(m, hidden, device="cuda", dtype=torch.float16) * 0.1
    sides: dict[str, Callable[[], Any]] = {"torch": lambda: plain(x), "bundle": lambda: ours(x)}
    if NOISE_SIDE in wanted:
        sides[NOISE_SIDE] = lambda: plain(x)
    if "tunableop" in wanted:
        sides["tunableop"] = with_tunableop(lambda: plain(x))
    if "compile" in wanted:
        compiled = torch.compile(plain, mode=COMPILE_MODE, dynamic=False)
        sides["compile"] = lambda: compiled(x)
        # the bundle's block compiled too: its ops stay opaque, Inductor fuses the rest
        compiled_ours = torch.compile(ours, mode=COMPILE_MODE, dynamic=False)
        sides["bundle_compile"] = lambda: compiled_ours(x)
    served = {
        "gate/up": gemmforge_bundle.kernel_for(m, intermediate, hidden, "tn"),
        "down": gemmforge_bundle.kernel_for(m, hidden, intermediate, "tn"),
    }
    return sides, served


# -- rows, summary, table ------------------------------------------------------------------------
def row(
    part: str, m: int, n: int | None, k: int | None, served: Any, sides, timer: Timer
) -> dict[str, Any]:
    """One measured row: its sides' outputs checked against torch's, then timed (a side that
    failed its check is not timed; errors are kept in the row)."""
    errors: dict[str, str] = {}
    diffs = max_abs_diffs(sides, errors)
    working = {name: fn for name, fn in sides.items() if name in diffs}
    out = {
        "part": part,
        "m": m,
        "n": n,
        "k": k,
        "served": served,
        "max_abs_diff_vs_torch": diffs,
        "us": time_sides(working, timer, errors),
    }
    if errors:
        out["errors"] = errors
    return out


def geomean(values: Iterable[float]) -> float | None:
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def speedups(rows: Sequence[Mapping[str, Any]], mode: str, over: str) -> list[float]:
    """``over``'s time / the bundle's, per row that timed both in ``mode``."""
    out = []
    for r in rows:
        times = r["us"].get(mode, {})
        if times.get(over) and times.get("bundle"):
            out.append(times[over] / times["bundle"])
    return out


def self_ratios(rows: Sequence[Mapping[str, Any]], mode: str) -> list[float]:
    """torch's time over its own second side's, per row that timed both in ``mode``."""
    out = []
    for r in rows:
        times = r["us"].get(mode, {})
        if times.get("torch") and times.get(NOISE_SIDE):
            out.append(times["torch"] / times[NOISE_SIDE])
    return out


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per part (projections, MLP) and mode: the bundle over each other side (time ratio, > 1:
    the bundle is faster), its geomean and worst, beside torch over itself (its lowest and
    highest ratio: the noise); and the host time the bundle adds per call over torch.matmul."""
    out: dict[str, Any] = {}
    for part, chosen in (("proj", [r for r in rows if r["part"] != "mlp"]),
                         ("mlp", [r for r in rows if r["part"] == "mlp"])):  # fmt: skip
        if not chosen:
            continue
        timed = {s for r in chosen for t in r["us"].values() for s in t}
        others = sorted(timed - {"bundle", NOISE_SIDE})
        part_summary: dict[str, Any] = {"rows": len(chosen)}
        for mode in ("graph", "eager"):
            part_summary[mode] = {}
            if same := self_ratios(chosen, mode):
                part_summary[mode]["torch_vs_itself"] = {"low": min(same), "high": max(same)}
            for other in others:
                ratios = speedups(chosen, mode, other)
                if ratios:
                    part_summary[mode][other] = {
                        "geomean": geomean(ratios),
                        "worst": min(ratios),
                        "at_least_0.99": sum(r >= 0.99 for r in ratios),
                        "of": len(ratios),
                    }
        host = [r["us"]["host"] for r in chosen]
        extra = sorted(h["bundle"] - h["torch"] for h in host if "bundle" in h and "torch" in h)
        if extra:
            part_summary["host_us_over_torch"] = {
                "max": extra[-1],
                "median": extra[len(extra) // 2],
            }
        out[part] = part_summary
    return out


def table(report: Mapping[str, Any]) -> str:
    """One table: per row, each side's graph, eager and host µs, and what the bundle served."""
    rows = report["rows"]
    sides = [s for s in (*SIDES, "bundle_compile") if any(s in r["us"]["graph"] for r in rows)]
    head = " ".join(f"{s[:9]:>9}" for s in sides)
    lines = [f"{'part':<10} {'shape':<13} {'M':>5} {'mode':<6} {head}  bundle served"]
    for r in rows:
        shape = f"{r['n']}x{r['k']}" if r["n"] else "block"
        for mode in MODES:
            times = r["us"][mode]
            cells = " ".join(
                f"{times[s]:9.2f}" if s in times else f"{'-':>9}" for s in sides
            )  # fmt: skip
            served = r["served"] if mode == "graph" else ""
            if isinstance(served, Mapping):
                served = ", ".join(f"{k}: {v or 'torch.matmul'}" for k, v in served.items())
            elif mode == "graph":
                served = served or "torch.matmul"
            lines.append(f"{r['part']:<10} {shape:<13} {r['m']:>5} {mode:<6} {cells}  {served}")
    for part, s in report.get("summary", {}).items():
        for mode in ("graph", "eager"):
            for other, v in s.get(mode, {}).items():
                if other == "torch_vs_itself":
                    lines.append(
                        f"{part} {mode}: torch vs itself (the noise): "
                        f"{v['low']:.3f}x to {v['high']:.3f}x"
                    )
                    continue
                lines.append(
                    f"{part} {mode}: bundle vs {other}: geomean {v['geomean']:.3f}x, worst "
                    f"{v['worst']:.3f}x, >= 0.99x on {v['at_least_0.99']} of {v['of']}"
                )
        if host := s.get("host_us_over_torch"):
            lines.append(
                f"{part} host: bundle - torch.matmul: max {host['max']:+.2f} µs, median "
                f"{host['median']:+.2f} µs per call"
            )
    return "\n".join(lines)


def environment(cublaslt_version: int | None) -> dict[str, Any]:
    """The GPU, driver, CUDA, cuBLASLt (the version the bundle's shim loads) and torch."""
    import torch

    from engine.gpu.environment import collect

    try:
        gpu = asdict(collect(cublaslt_version=cublaslt_version))
    except Exception as exc:  # the environment is a record, not a gate
        gpu = {"error": str(exc)}
    return {
        **gpu,
        "gpu": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "compile_mode": COMPILE_MODE,
    }


def measure(
    args: argparse.Namespace,
    timer: Timer,
    make_projection=projection_sides,
    make_mlp=mlp_sides,
    save: Callable[[dict[str, Any]], None] = lambda report: None,
    report: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every row of --parts at every M, saved after each; the summary at the end. Rows already in
    ``report`` (a resumed run's) are kept and not measured again."""
    report = report if report is not None else {}
    report.setdefault("rows", [])
    done = {(r["part"], r["m"]) for r in report["rows"]}
    ms = [int(m) for m in args.ms.split(",") if m.strip()]
    parts = {p.strip() for p in args.parts.split(",")}
    wanted = sides_of(args)
    if "proj" in parts:
        for p in projections(args.hidden, args.intermediate, args.heads, args.kv_heads):
            for m in ms:
                if (p.names, m) in done:
                    continue
                log(f"{p.names} {m}x{p.n}x{p.k}")
                sides, served = make_projection(p, m, wanted)
                report["rows"].append(row(p.names, m, p.n, p.k, served, sides, timer))
                save(report)
    if "mlp" in parts:
        for m in ms:
            if ("mlp", m) in done:
                continue
            log(f"mlp M={m}")
            sides, served = make_mlp(m, args.hidden, args.intermediate, wanted)
            report["rows"].append(row("mlp", m, None, None, served, sides, timer))
            save(report)
    report["summary"] = summary(report["rows"])
    save(report)
    return report


def same_machine(environment: Mapping[str, Any]) -> dict[str, Any]:
    """An environment less what changes from run to run on one machine (when, the clocks)."""
    return {k: v for k, v in environment.items() if k not in ("date", "recorded_at", "clocks")}


def resumed_rows(path: Path | None, report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of an earlier run's report, if it ran on this machine's GPU and software with the
    same bundle table; else none (rows of another machine or bundle must not share this table)."""
    if path is None or not path.is_file():
        return []
    earlier = json.loads(path.read_text())
    if same_machine(earlier.get("environment", {})) != same_machine(report["environment"]):
        log(f"not resuming {path}: its environment differs from this run's")
        return []
    if earlier.get("table") != report.get("table"):
        log(f"not resuming {path}: its bundle's table differs from this one's")
        return []
    rows = earlier.get("rows", [])
    log(f"resuming {path}: {len(rows)} rows kept")
    return rows


def campaign_shapes(args: argparse.Namespace) -> str:
    """The problems a campaign for this proof searches: every projection at every M."""
    shapes = [
        f"{m}x{p.n}x{p.k}"
        for m in (int(m) for m in args.ms.split(","))
        for p in projections(args.hidden, args.intermediate, args.heads, args.kv_heads)
    ]
    return ",".join(shapes)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.print_shapes:
        print(campaign_shapes(args))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO / "bench"))
    from bundle_overhead import unpack_and_build

    root = Path(tempfile.mkdtemp(prefix="gemmforge-llama-"))
    unpack_and_build(args.zip, root, args.jobs, args.timeout, args.out)
    import gemmforge_bundle
    from gemmforge_bundle import _ops

    shim = _ops._load_shim()
    report: dict[str, Any] = {
        "environment": environment(int(shim.gemmforge_lt_version()) if shim else None),
        "bundle": str(args.zip),
        "native_ops": bool(_ops.NATIVE),
        "manifest_cublaslt": _ops._manifest().get("cublaslt"),
        "table": sorted(map(list, gemmforge_bundle.bucket_table())),
    }
    report["rows"] = resumed_rows(args.resume, report)

    def save(r: dict[str, Any]) -> None:
        (args.out / REPORT).write_text(json.dumps(r, indent=1, default=str))

    configure_torch()
    measure(args, CudaTimer(args), save=save, report=report)
    text = table(report)
    (args.out / "llama_proof.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
