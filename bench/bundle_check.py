"""A real campaign's kernel bundle on the GPU, built, verified and timed.

    python3 bench/bundle_check.py --db CAMPAIGN.sqlite [--campaign NAME] --out DIR

1. Writes the bundle with `python -m engine bundle` (called in-process): by default only kernels
   that beat torch.matmul; when the campaign has none, says so and bundles every shape's best
   verified kernel instead (`--include-slower`) so that the pipeline is still exercised. Without
   --campaign, the database's only (or else its latest) campaign is used.
2. Unpacks it into a temporary folder and runs `python -m gemmforge_bundle.build` and
   `python -m gemmforge_bundle.verify` there (PYTHONPATH: the unpacked root, then the caller's).
3. Per bundled (M, N, K, layout), in a child process (a crashing or hanging kernel is data):
   - correctness: torch.ops.gemmforge.hgemm (NN) / hgemm_linear (TN) against an fp32 reference,
     relative Frobenius error within 2x torch.matmul's own (fp16 reduced-precision reduction off
     for that reference error, as in the bundle's verify.py);
   - torch.compile(fullgraph=True) of the op gives a correct answer;
   - an nn.Linear(K, N, bias=False) whose forward is swapped for the op (TN: hgemm_linear with the
     weight as is; NN: hgemm with the weight transposed once) is correct within the same rule;
   - speed: each side is captured in its own CUDA graph of `calls` back-to-back calls and the
     graphs are replayed alternately (`replays` times after 3 warm-up replays; the median replay
     time divided by `calls`). Inputs are fresh N(0, 1) fp16 and the calls rotate over S operand
     sets, S chosen so the sets span twice the L2 (at least 2, at most 512 sets / 8 GiB; shapes too
     small for that run L2-warm for both sides, marked l2_cold=false). No L2 flush: it would run
     inside the timed graph. torch.matmul runs with torch's default flags, as a user calls it. The
     graphs' last outputs are checked against the fp32 reference after the replays.
4. Writes DIR/bundle_check.json (after each stage, so a run cut short keeps what it did; the
   child's per-shape results land in DIR/bundle_check-measure.json as they come), the stages'
   full logs as DIR/bundle_check-*.log, the zip(s), and prints a table.

Exit status 1 when a check failed: build, verify, measurement, a wrong answer (eager, graph,
torch.compile, nn.Linear), or, for the default bundle, a kernel not faster than torch.matmul.
"acceptance_met" additionally needs the default bundle (kernels that beat torch in the campaign).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as `python3 bench/bundle_check.py` from anywhere
    sys.path.insert(0, str(REPO))

REPORT = "bundle_check.json"
TAIL = 4000
MAX_SETS = 512
MAX_SET_BYTES = 8 << 30
SHAPE_CHECKS = ("correct", "graph", "compile", "linear", "faster")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/bundle_check.py", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--db", type=Path, help="the campaign's SQLite file (engine optimize --db)")
    parser.add_argument(
        "--campaign", help="campaign name (default: the database's only or latest campaign)"
    )
    parser.add_argument("--out", type=Path, help="folder for bundle_check.json, logs and zips")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc jobs")
    parser.add_argument("--calls", type=int, default=20, help="calls per CUDA graph (minimum)")
    parser.add_argument("--replays", type=int, default=50, help="timed replays per graph")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=480, help="seconds per stage")
    # the child process that imports the unpacked bundle and measures it (GPU only)
    parser.add_argument("--measure-into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_into is None and (args.db is None or args.out is None):
        parser.error("--db and --out are required")
    if args.calls < 1 or args.replays < 1:
        parser.error("--calls and --replays must be positive")
    return args


# -- 1. the bundle ---------------------------------------------------------------------------
def campaign_names(db: Path) -> list[str]:
    """The database's campaigns, oldest first."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM campaigns ORDER BY created, rowid")]


def choose_campaign(db: Path, given: str | None) -> dict[str, Any]:
    """{"name", "chosen_by", "known"}; name None (with "error") when there is nothing to use."""
    if not db.is_file():
        return {"name": None, "error": f"no such campaign database: {db}"}
    try:
        known = campaign_names(db)
    except sqlite3.Error as exc:
        return {"name": None, "error": f"cannot read {db}: {exc}"}
    if given is not None:
        if given in known:
            return {"name": given, "chosen_by": "--campaign", "known": known}
        return {"name": None, "known": known, "error": f"no campaign named {given!r} in {db}"}
    if not known:
        return {"name": None, "known": known, "error": f"no campaign in {db}"}
    return {"name": known[-1], "chosen_by": "only" if len(known) == 1 else "latest", "known": known}


def bundle_kernels(path: Path) -> list[dict[str, Any]]:
    from engine.publish.bundle import read_manifest

    return read_manifest(path)["kernels"]


def write_zip(db: Path, campaign: str, out: Path, *, include_slower: bool) -> str | None:
    """`python -m engine bundle`, in-process; the error message when it refused."""
    from engine.cli import main as engine_main

    argv = ["bundle", campaign, "--db", str(db), "--out", str(out)]
    try:
        status = engine_main([*argv, "--include-slower"] if include_slower else argv)
    except SystemExit as exc:
        return str(exc.code)
    except Exception as exc:  # e.g. a candidate whose family cannot be rendered
        return f"{type(exc).__name__}: {exc}"
    return None if status == 0 else f"engine bundle exited with status {status}"


def make_bundle(db: Path, campaign: str, out: Path) -> dict[str, Any]:
    """The default bundle (kernels faster than torch.matmul), else the all-kernels one."""
    info: dict[str, Any] = {"mode": None, "zip": None, "kernels": [], "note": ""}
    default = out / "bundle.zip"
    error = write_zip(db, campaign, default, include_slower=False)
    if error:
        return {**info, "error": error}
    info["default_kernels"] = len(bundle_kernels(default))
    if info["default_kernels"]:
        return {**info, "mode": "default", "zip": str(default), "kernels": bundle_kernels(default)}
    fallback = out / "bundle-all.zip"
    error = write_zip(db, campaign, fallback, include_slower=True)
    note = (
        "no kernel of this campaign beats torch.matmul: the default bundle is empty; checking "
        "the bundle of every shape's best verified kernel (--include-slower) instead"
    )
    if error:
        return {**info, "note": note, "error": error}
    kernels = bundle_kernels(fallback)
    if not kernels:
        return {**info, "note": note, "error": "the campaign has no verified kernel at all"}
    return {**info, "mode": "all", "zip": str(fallback), "kernels": kernels, "note": note}


# -- 2. build and verify, as a user would ----------------------------------------------------
def bundle_env(root: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def run_stage(name: str, argv: list[str], root: Path, out: Path, timeout: int) -> dict[str, Any]:
    """Runs one stage in the unpacked bundle, its output streamed to bundle_check-NAME.log."""
    log(f"{name}: {' '.join(argv[1:])}")
    path = out / f"bundle_check-{name}.log"
    started = time.monotonic()
    with path.open("w") as logfile:
        try:
            returncode: int | None = subprocess.run(
                argv,
                cwd=root,
                env=bundle_env(root),
                stdout=logfile,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = None
    text = path.read_text(errors="replace")
    if returncode is None:
        text += f"\n[timed out after {timeout} s]"
        path.write_text(text)
    seconds = round(time.monotonic() - started, 1)
    log(f"{name}: exit {returncode} after {seconds} s")
    return {
        "argv": argv[1:],
        "returncode": returncode,
        "ok": returncode == 0,
        "seconds": seconds,
        "output_tail": text[-TAIL:],
    }


# -- 3. the measurements (child process, GPU) ------------------------------------------------
def measure(into: Path, *, calls: int, replays: int, seed: int) -> int:
    """Runs in the unpacked bundle's folder; writes {"environment", "shapes"} after each shape."""
    import torch

    result: dict[str, Any] = {"environment": {}, "shapes": []}

    def save() -> None:  # atomically: the parent may read it after a kill
        partial = into.with_suffix(".partial")
        partial.write_text(json.dumps(result, indent=1))
        partial.replace(into)

    if not torch.cuda.is_available():
        result["error"] = "CUDA is not available: the measurements need an NVIDIA GPU"
        save()
        return 1
    import gemmforge_bundle
    from gemmforge_bundle.verify import rel_error

    from engine.gpu.environment import collect

    try:
        result["environment"] = collect().to_dict()
    except Exception as exc:
        result["environment"] = {"error": f"{type(exc).__name__}: {exc}"}
    result["environment"].update(
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        gpu=torch.cuda.get_device_name(0),
        # torch.matmul is timed with torch's default (what a user gets)
        fp16_reduced_precision_reduction=(
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
    )
    save()
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0)) or 50 << 20
    with torch.no_grad():
        for (m, n, k, layout), name in sorted(gemmforge_bundle.dispatch_table().items()):
            log(f"measure {m}x{n}x{k} {layout} ({name})")
            try:  # the ShapeCheck (and its operands) is gone once run() returns
                record = ShapeCheck(m, n, k, layout, l2=l2, seed=seed, rel_error=rel_error).run(
                    calls=calls, replays=replays
                )
            except Exception as exc:  # setup failed (out of memory, a sticky CUDA error, ...)
                record = {"m": m, "n": n, "k": k, "layout": layout, "sets": 0, "errors": {}}
                record["checks"] = dict.fromkeys(SHAPE_CHECKS, False)
                record["failures"] = {"setup": f"{type(exc).__name__}: {exc}"[:TAIL]}
            result["shapes"].append({"kernel": name, **record})
            save()
            torch.cuda.empty_cache()
    return 0


class ShapeCheck:
    """One bundled shape's checks; each failure is recorded, none is raised."""

    def __init__(
        self, m: int, n: int, k: int, layout: str, *, l2: int, seed: int, rel_error: Callable
    ) -> None:
        import torch

        self.torch, self.rel_error = torch, rel_error
        self.m, self.n, self.k, self.layout = m, n, k, layout
        self.op = torch.ops.gemmforge.hgemm if layout == "nn" else torch.ops.gemmforge.hgemm_linear
        set_bytes = 2 * (m * k + k * n)
        free = torch.cuda.mem_get_info()[0]
        fit = max(2, min(MAX_SETS, MAX_SET_BYTES // set_bytes, free // (4 * set_bytes)))
        self.set_count = int(min(fit, max(2, math.ceil(2 * l2 / set_bytes))))
        self.l2_cold = self.set_count * set_bytes >= 2 * l2
        gen = torch.Generator(device="cuda").manual_seed(seed)
        b_shape = (k, n) if layout == "nn" else (n, k)
        self.sets = [
            (self.randn((m, k), gen), self.randn(b_shape, gen)) for _ in range(self.set_count)
        ]
        self.record: dict[str, Any] = {
            "m": m,
            "n": n,
            "k": k,
            "layout": layout,
            "sets": self.set_count,
            "l2_cold": self.l2_cold,
            "errors": {},
            "checks": {},
            "failures": {},
        }

    def randn(self, shape: tuple[int, int], gen: Any) -> Any:
        return self.torch.randn(shape, generator=gen, device="cuda", dtype=self.torch.float16)

    def ours(self, a: Any, b: Any) -> Any:
        return self.op(a, b)

    def theirs(self, a: Any, b: Any) -> Any:
        return self.torch.matmul(a, b if self.layout == "nn" else b.t())

    def reference(self, a: Any, b: Any) -> Any:
        b32 = b.float()
        return a.float() @ (b32 if self.layout == "nn" else b32.t())

    def attempt(self, check: str, fn: Callable[[], bool]) -> None:
        try:
            self.record["checks"][check] = bool(fn())
        except Exception as exc:
            self.record["checks"][check] = False
            self.record["failures"][check] = f"{type(exc).__name__}: {exc}"[:TAIL]

    def run(self, *, calls: int, replays: int) -> dict[str, Any]:
        torch, errors = self.torch, self.record["errors"]
        a, b = self.sets[0]
        ref = self.reference(a, b)
        matmul = torch.backends.cuda.matmul
        default = matmul.allow_fp16_reduced_precision_reduction
        matmul.allow_fp16_reduced_precision_reduction = False
        try:
            errors["torch"] = self.rel_error(self.theirs(a, b), ref)
        finally:
            matmul.allow_fp16_reduced_precision_reduction = default
        tol = errors["tolerance"] = max(2 * errors["torch"], 1e-5)

        def within(key: str, out: Any) -> bool:
            errors[key] = self.rel_error(out, ref)
            return errors[key] <= tol

        self.attempt("correct", lambda: within("ours", self.ours(a, b)))

        def compiled() -> bool:
            torch._dynamo.reset()  # each shape compiles afresh (no recompile limit, no reuse)
            return within("compile", torch.compile(self.ours, fullgraph=True)(a, b))

        self.attempt("compile", compiled)
        self.attempt("linear", self.linear)
        self.attempt("graph", lambda: self.timed(calls=calls, replays=replays))
        self.attempt("faster", lambda: self.record.get("speedup", 0.0) > 1.0)
        return self.record

    def linear(self) -> bool:
        """nn.Linear(K, N) on X (M, K), its forward swapped for the op."""
        torch, errors = self.torch, self.record["errors"]
        x = self.sets[0][0]
        module = torch.nn.Linear(self.k, self.n, bias=False, device="cuda", dtype=torch.float16)
        ref = x.float() @ module.weight.float().t()
        matmul = torch.backends.cuda.matmul
        default = matmul.allow_fp16_reduced_precision_reduction
        matmul.allow_fp16_reduced_precision_reduction = False
        try:
            want = module(x)
        finally:
            matmul.allow_fp16_reduced_precision_reduction = default
        if self.layout == "tn":
            weight = module.weight
            module.forward = lambda t: torch.ops.gemmforge.hgemm_linear(t, weight)
        else:
            weight_t = module.weight.t().contiguous()  # once, as a user would store it
            module.forward = lambda t: torch.ops.gemmforge.hgemm(t, weight_t)
        got = module(x)
        errors["linear_torch"] = self.rel_error(want, ref)
        errors["linear_tolerance"] = max(2 * errors["linear_torch"], 1e-5)
        errors["linear"] = self.rel_error(got, ref)
        errors["linear_vs_torch"] = self.rel_error(got, want)
        return errors["linear"] <= errors["linear_tolerance"]

    def graph(self, fn: Callable, calls: int) -> tuple[Any, Any]:
        """A CUDA graph of ``calls`` calls rotating over the operand sets; its last output."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: loads the kernel, lets cuBLAS pick its algorithm
            for a, b in self.sets[:2]:
                fn(a, b)
        torch.cuda.current_stream().wait_stream(side)
        graph, out = torch.cuda.CUDAGraph(), None
        with torch.cuda.graph(graph):
            for i in range(calls):
                out = fn(*self.sets[i % self.set_count])
        return graph, out

    def timed(self, *, calls: int, replays: int) -> bool:
        """µs per call of both sides; True when both graphs' last outputs are correct."""
        torch, record = self.torch, self.record
        calls = max(calls, self.set_count)
        record["calls_per_graph"], record["replays"] = calls, replays
        graphs = {"ours": self.graph(self.ours, calls), "torch": self.graph(self.theirs, calls)}
        for graph, _ in graphs.values():
            for _ in range(3):
                graph.replay()
        events: dict[str, list[tuple[Any, Any]]] = {name: [] for name in graphs}
        for rep in range(replays):
            order = list(graphs) if rep % 2 == 0 else list(reversed(graphs))
            for name in order:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                graphs[name][0].replay()
                end.record()
                events[name].append((start, end))
        torch.cuda.synchronize()
        us = {
            name: statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3 / calls
            for name, pairs in events.items()
        }
        record["our_us"], record["torch_us"] = round(us["ours"], 3), round(us["torch"], 3)
        record["speedup"] = round(us["torch"] / us["ours"], 4)
        ref = self.reference(*self.sets[(calls - 1) % self.set_count])
        errors = record["errors"]
        errors["graph"] = self.rel_error(graphs["ours"][1], ref)
        errors["graph_torch"] = self.rel_error(graphs["torch"][1], ref)
        return errors["graph"] <= errors["tolerance"]


# -- 4. the verdict and the report -----------------------------------------------------------
def verdict(report: dict[str, Any]) -> dict[str, Any]:
    """{"checks": {name: bool}, "failed": [names], "passed", "acceptance_met"}."""
    bundle = report.get("bundle", {})
    shapes = report.get("shapes", [])
    checks: dict[str, bool] = {"bundle": bool(bundle.get("kernels")) and not bundle.get("error")}
    if not checks["bundle"]:
        return {"checks": checks, "failed": ["bundle"], "passed": False, "acceptance_met": False}
    for stage in ("build", "verify", "measure"):
        checks[stage] = bool(report.get(stage, {}).get("ok"))
    checks["measured_every_shape"] = len(shapes) == len(bundle.get("kernels", [])) > 0
    for check in SHAPE_CHECKS:
        if check == "faster" and bundle.get("mode") != "default":
            continue  # the all-kernels bundle holds kernels known to be slower
        checks[check] = bool(shapes) and all(s["checks"].get(check) for s in shapes)
    failed = [name for name, ok in checks.items() if not ok]
    passed = not failed
    return {
        "checks": checks,
        "failed": failed,
        "passed": passed,
        "acceptance_met": passed and bundle.get("mode") == "default",
    }


def table(report: dict[str, Any]) -> str:
    """One line per shape: measured here (CUDA graphs) and, for comparison, in the campaign."""
    campaign = {
        (e["m"], e["n"], e["k"], e["layout"]): e.get("speedups", {}).get("torch")
        for e in report.get("bundle", {}).get("kernels", [])
    }
    lines = [
        f"{'shape':>20} {'lay':>3} {'ours µs':>9} {'torch µs':>9} {'speedup':>8} {'campaign':>8} "
        f"{'rel err':>9} {'tol':>9} {'sets':>4}  checks"
    ]
    for s in report.get("shapes", []):
        errors, checks = s["errors"], s["checks"]
        bad = [c for c in SHAPE_CHECKS if c in checks and not checks[c]]
        shape = f"{s['m']}x{s['n']}x{s['k']}"
        lines.append(
            f"{shape:>20} {s['layout']:>3} {fmt(s.get('our_us'), '.2f', 9)} "
            f"{fmt(s.get('torch_us'), '.2f', 9)} {fmt(s.get('speedup'), '.3f', 7)}x "
            f"{fmt(campaign.get((s['m'], s['n'], s['k'], s['layout'])), '.3f', 7)}x "
            f"{fmt(errors.get('ours'), '.2e', 9)} {fmt(errors.get('tolerance'), '.2e', 9)} "
            f"{s['sets']:>4}  " + ("ok" if not bad else "FAILED " + ",".join(bad))
        )
    if report.get("bundle", {}).get("note"):
        lines.append(report["bundle"]["note"])
    v = report["verdict"]
    outcome = "PASSED" if v["passed"] else "FAILED " + ", ".join(v["failed"])
    lines.append(
        f"bundle: {report.get('bundle', {}).get('mode')}; {outcome}; "
        f"acceptance {'met' if v['acceptance_met'] else 'not met'}"
    )
    return "\n".join(lines)


def fmt(value: float | None, spec: str, width: int) -> str:
    return f"{value:{width}{spec}}" if isinstance(value, int | float) else f"{'-':>{width}}"


def save(report: dict[str, Any], out: Path) -> None:
    report.pop("verdict", None)
    report["verdict"] = verdict(report)  # last in the file
    (out / REPORT).write_text(json.dumps(report, indent=1))


def check(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "script": "bench/bundle_check.py",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host_python": platform.python_version(),
        "db": str(args.db),
        "settings": {"calls": args.calls, "replays": args.replays, "seed": args.seed},
    }
    report["campaign"] = choose_campaign(args.db, args.campaign)
    name = report["campaign"]["name"]
    report["bundle"] = make_bundle(args.db, name, out) if name else {"error": "no campaign"}
    save(report, out)
    if not report["bundle"].get("zip"):
        log(f"no bundle: {report['campaign'].get('error') or report['bundle'].get('error')}")
        return report
    log(f"bundle {report['bundle']['mode']}: {len(report['bundle']['kernels'])} kernel(s)")
    with tempfile.TemporaryDirectory(prefix="gemmforge-bundle-check-") as tmp:
        from engine.publish.bundle import unpack

        root = unpack(Path(report["bundle"]["zip"]), Path(tmp))
        python = sys.executable
        stages = {
            "build": [python, "-m", "gemmforge_bundle.build", "--jobs", str(args.jobs)],
            "verify": [python, "-m", "gemmforge_bundle.verify"],
        }
        for stage, argv in stages.items():
            report[stage] = run_stage(stage, argv, root, out, args.timeout)
            save(report, out)
        measured = out / "bundle_check-measure.json"
        measured.unlink(missing_ok=True)
        argv = [python, str(Path(__file__).resolve()), "--measure-into", str(measured)]
        argv += ["--calls", str(args.calls), "--replays", str(args.replays)]
        report["measure"] = run_stage(
            "measure", [*argv, "--seed", str(args.seed)], root, out, args.timeout
        )
        report["environment"], report["shapes"] = {}, []
        if measured.is_file():  # written after each shape: kept even when the child died
            child = json.loads(measured.read_text())
            report["environment"] = child["environment"]
            report["shapes"] = child["shapes"]
            if child.get("error"):
                report["measure"]["error"] = child["error"]
        save(report, out)
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.measure_into is not None:
        return measure(args.measure_into, calls=args.calls, replays=args.replays, seed=args.seed)
    report = check(args)
    print(table(report))
    print(f"wrote {args.out / REPORT}")
    return 0 if report["verdict"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
