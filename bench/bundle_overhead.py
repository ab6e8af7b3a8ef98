"""Host overhead and a Llama-style MLP block: a kernel bundle against torch.matmul on the GPU.

    python3 bench/bundle_overhead.py (--zip BUNDLE.zip | --db CAMPAIGN.sqlite [--campaign NAME])
        --out DIR [--ms 1,16,128,1024,4096] [--hidden 4096 --intermediate 14336]

Unpacks the bundle (from --db: writes it first with `python -m engine bundle`, dynamic M on),
builds it with `python -m gemmforge_bundle.build`, imports it, then per bundled (N, K, layout)
and per M of --ms (an M no bucket covers is measured too: it shows the fallback's cost):

- host: host time per call in eager mode, with the GPU held busy by a long torch.cuda._sleep
  so that only the enqueueing is timed (``gpu_busy`` records that the sleep outlasted it), for
  torch.matmul, the registered op (torch.ops.gemmforge.*) and the direct call
  (gemmforge_bundle.matmul / linear: the op called from pybind11 where the bundle built it,
  else through torch.ops' .default; with the Python ops, their eager path without the op);
- eager: wall time per call of back-to-back eager calls (host and device together), median of
  ``--repeats`` runs;
- graph: device time per call, each side captured in its own CUDA graph of ``--calls`` calls and
  the graphs replayed alternately (median of ``--replays``);
- mlp: a Llama-style MLP block, down(silu(gate(x)) * up(x)), with nn.Linear weights of --hidden
  and --intermediate, forward time without and with the bundle (eager wall and CUDA graph), and
  its output's largest difference from the block without the bundle.

Writes DIR/bundle_overhead.json (after each shape, so a cut-short run keeps what it did) and
prints a table. Claims nothing: the JSON holds the times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

REPORT = "bundle_overhead.json"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/bundle_overhead.py")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--zip", type=Path, help="a bundle written by `python -m engine bundle`")
    source.add_argument("--db", type=Path, help="a campaign's SQLite file to bundle first")
    parser.add_argument("--campaign", help="campaign name (default: the database's latest)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ms", default="1,16,128,1024,4096", help="comma-separated Ms")
    parser.add_argument("--hidden", type=int, default=4096, help="MLP model width (Llama-3-8B)")
    parser.add_argument("--intermediate", type=int, default=14336, help="MLP inner width")
    parser.add_argument("--host-calls", type=int, default=200, help="calls per host timing")
    parser.add_argument("--calls", type=int, default=20, help="calls per CUDA graph")
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=20, help="eager runs per median")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=480, help="seconds for the build")
    return parser.parse_args(argv)


# -- setup -----------------------------------------------------------------------------------
def bundle_zip(args: argparse.Namespace) -> Path:
    if args.zip:
        return args.zip
    sys.path.insert(0, str(REPO / "bench"))
    from bundle_check import choose_campaign, write_zip

    chosen = choose_campaign(args.db, args.campaign)
    if chosen["name"] is None:
        raise SystemExit(f"error: {chosen['error']}")
    campaign = chosen["name"]
    out = args.out / "bundle.zip"
    error = write_zip(args.db, campaign, out, include_slower=False)
    if error:
        raise SystemExit(f"error: could not write the bundle: {error}")
    return out


def unpack_and_build(path: Path, target: Path, jobs: int, timeout: int, out: Path) -> Path:
    """Unpacks and builds the bundle; returns its folder (the one holding gemmforge_bundle)."""
    from engine.publish.bundle import unpack

    root = unpack(path, target)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    with (out / "bundle_overhead-build.log").open("w") as logfile:
        done = subprocess.run(
            [sys.executable, "-m", "gemmforge_bundle.build", "--jobs", str(jobs)],
            cwd=root,
            env=env,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"error: the bundle did not build: see {logfile.name}")
    sys.path.insert(0, str(root))
    return root


# -- timing ----------------------------------------------------------------------------------
def host_us(fn: Callable[[], Any], calls: int) -> dict[str, Any]:
    """Host time per call while the GPU sleeps: the enqueueing alone."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    busy = torch.cuda.Event()
    torch.cuda._sleep(int(1e8))  # ~50 ms of GPU clock cycles: outlasts the calls below
    busy.record()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = time.perf_counter() - start
    gpu_busy = not busy.query()
    torch.cuda.synchronize()
    return {"us": seconds / calls * 1e6, "gpu_busy": gpu_busy}


def eager_us(fn: Callable[[], Any], calls: int, repeats: int) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(runs)


def replay_order(names: list[str], round_: int) -> list[str]:
    """The sides' order in replay round ``round_``: rotated by one each round."""
    shift = round_ % len(names)
    return names[shift:] + names[:shift]


def graph_us(sides: dict[str, Callable[[], Any]], calls: int, replays: int) -> dict[str, float]:
    """Device time per call of each side, from CUDA graphs replayed alternately, the order
    rotated each round so that no side always holds the same place in it."""
    import torch

    graphs = {}
    stream = torch.cuda.Stream()
    for name, fn in sides.items():
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        graphs[name] = graph
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for i in range(replays + 3):
        for name in replay_order(list(graphs), i):
            graph = graphs[name]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            if i >= 3:
                times[name].append(start.elapsed_time(end) * 1e3 / calls)
    return {name: statistics.median(t) for name, t in times.items()}


# -- the measurements ------------------------------------------------------------------------
def gemm_row(n: int, k: int, layout: str, m: int, args: argparse.Namespace) -> dict[str, Any]:
    import gemmforge_bundle
    import torch

    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    if layout == "nn":
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        sides = {
            "torch": lambda: torch.matmul(a, b),
            "op": lambda: torch.ops.gemmforge.hgemm(a, b),
            "direct": lambda: gemmforge_bundle.matmul(a, b),
        }
        kernel = gemmforge_bundle.kernel_for(m, n, k, "nn")
    else:
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        sides = {
            "torch": lambda: torch.nn.functional.linear(a, w),
            "op": lambda: torch.ops.gemmforge.hgemm_linear(a, w),
            "direct": lambda: gemmforge_bundle.linear(a, w),
        }
        kernel = gemmforge_bundle.kernel_for(m, n, k, "tn")
    ref = sides["torch"]().float()
    error = max(float((fn().float() - ref).abs().max()) for fn in sides.values())
    row: dict[str, Any] = {"m": m, "n": n, "k": k, "layout": layout, "kernel": kernel}
    row["max_abs_diff_vs_torch"] = error
    row["host"] = {name: host_us(fn, args.host_calls) for name, fn in sides.items()}
    row["eager_us"] = {name: eager_us(fn, args.calls, args.repeats) for name, fn in sides.items()}
    row["graph_us"] = graph_us(
        {"torch": sides["torch"], "op": sides["op"]}, args.calls, args.replays
    )
    return row


def mlp_row(m: int, args: argparse.Namespace) -> dict[str, Any]:
    import gemmforge_bundle
    import torch
    from torch import nn

    class MLP(nn.Module):
        """Llama's feed-forward block: down(silu(gate(x)) * up(x)), no biases."""

        def __init__(self, hidden: int, intermediate: int, linear: Callable | None) -> None:
            super().__init__()
            self.gate = nn.Linear(hidden, intermediate, bias=False)
            self.up = nn.Linear(hidden, intermediate, bias=False)
            self.down = nn.Linear(intermediate, hidden, bias=False)
            self.linear = linear

        def proj(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
            return layer(x) if self.linear is None else self.linear(x, layer.weight)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = nn.functional.silu(self.proj(self.gate, x)) * self.proj(self.up, x)
            return self.proj(self.down, h)

    torch.manual_seed(0)
    plain = MLP(args.hidden, args.intermediate, None).cuda().half().eval()
    direct = MLP(args.hidden, args.intermediate, gemmforge_bundle.linear).cuda().half().eval()
    op = MLP(args.hidden, args.intermediate, torch.ops.gemmforge.hgemm_linear).cuda().half().eval()
    direct.load_state_dict(plain.state_dict())
    op.load_state_dict(plain.state_dict())
    x = torch.randn(m, args.hidden, device="cuda", dtype=torch.float16) * 0.1
    kernels = {
        name: gemmforge_bundle.kernel_for(m, n, k, "tn")
        for name, (n, k) in {
            "gate_up": (args.intermediate, args.hidden),
            "down": (args.hidden, args.intermediate),
        }.items()
    }
    with torch.inference_mode():
        ref = plain(x).float()
        diff = max(float((f(x).float() - ref).abs().max()) for f in (direct, op))
        sides = {"torch": lambda: plain(x), "direct": lambda: direct(x), "op": lambda: op(x)}
        eager = {name: eager_us(fn, 5, args.repeats) for name, fn in sides.items()}
        graph = graph_us({"torch": sides["torch"], "op": sides["op"]}, 5, args.replays)
    return {
        "m": m,
        "kernels": kernels,
        "max_abs_diff_vs_torch": diff,
        "eager_us": eager,
        "graph_us": graph,
    }


def environment() -> dict[str, Any]:
    import torch

    return {
        "gpu": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def table(report: dict[str, Any]) -> str:
    lines = [
        "shape                  layout kernel                         host µs torch/op/direct  "
        "eager µs torch/op/direct   graph µs torch/op",
    ]
    for r in report["gemm"]:
        h, e, g = r["host"], r["eager_us"], r["graph_us"]
        lines.append(
            f"{r['m']}x{r['n']}x{r['k']:<12} {r['layout']:6} {str(r['kernel'])[:30]:30} "
            f"{h['torch']['us']:6.2f}/{h['op']['us']:6.2f}/{h['direct']['us']:6.2f}  "
            f"{e['torch']:8.2f}/{e['op']:8.2f}/{e['direct']:8.2f}  {g['torch']:8.2f}/{g['op']:8.2f}"
        )
    lines.append("MLP M   eager µs torch/direct/op      graph µs torch/op   kernels")
    for r in report["mlp"]:
        e, g = r["eager_us"], r["graph_us"]
        lines.append(
            f"{r['m']:<7} {e['torch']:9.1f}/{e['direct']:9.1f}/{e['op']:9.1f}  "
            f"{g['torch']:9.1f}/{g['op']:9.1f}   {r['kernels']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = bundle_zip(args)
    root = Path(tempfile.mkdtemp(prefix="gemmforge-bundle-"))
    root = unpack_and_build(path, root, args.jobs, args.timeout, args.out)
    import gemmforge_bundle

    ms = [int(m) for m in args.ms.split(",") if m.strip()]
    report: dict[str, Any] = {
        "environment": environment(),
        "bundle": str(path),
        "gemm": [],
        "mlp": [],
    }
    save = lambda: (args.out / REPORT).write_text(json.dumps(report, indent=1))  # noqa: E731
    for n, k, layout in sorted(gemmforge_bundle.bucket_table()):
        for m in ms:
            log(f"gemm {m}x{n}x{k} {layout}")
            report["gemm"].append(gemm_row(n, k, layout, m, args))
            save()
    for m in ms:
        log(f"mlp M={m}")
        report["mlp"].append(mlp_row(m, args))
        save()
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
