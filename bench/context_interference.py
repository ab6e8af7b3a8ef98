"""Does a CUDA context being created in another process move a device-protocol timing
that runs at the same moment? (bench/NOTES.md §16.)

The warm-verifier design creates the next batch's verifier contexts while the current batch is
on the GPU. A context's creation runs no kernel, but it maps memory and talks to the driver's
resource manager, which the timing process's calls may wait for. This measures it: for each
shape, one measurement session (engine.timing.measure: the four baselines in both layouts,
interleaved, L2 flushed, the device protocol) alternates quiet runs with runs during a *storm*:
``--creators`` processes that each fork, in a loop, a child that creates a context, allocates and
touches ``--megabytes`` and exits (the parent never initialises CUDA, as a fork server). Two storms:
``context`` allocates without touching (no kernel at all: what a warm verifier does before its
candidate arrives) and ``fill`` also fills the memory (a kernel per context). Reported per
runner: each run's median and p90, and each storm's runs' median over the quiet runs'; and how
many contexts were created during each storm run.

    python3 bench/context_interference.py [--shapes 4096x4096x4096,256x256x256] [--runs 3]
        [--creators 16] [--megabytes 256] [--device-seconds 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# A creator: imports torch (never initialising CUDA itself), says "ready", then forks one child
# after another until stdin closes; each child creates its context, allocates (and with "fill",
# touches) its memory, exits. Prints how many contexts its children created.
CREATOR = """
import os, select, sys, torch
size, touch = int(sys.argv[1]), sys.argv[2] == "fill"
print("ready", flush=True)
created = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    pid = os.fork()
    if pid == 0:
        try:
            memory = torch.empty(size, dtype=torch.uint8, device="cuda")
            if touch:
                memory.fill_(1)
            torch.cuda.synchronize()
        except Exception:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    created += status == 0
print(created, flush=True)
"""


STORMS = (None, "context", "fill")  # run after run, in this order (None: quiet)


class Storm:
    """``creators`` creator processes, creating contexts from when it starts until it stops;
    ``kind``: "context" (no kernel) or "fill" (each context also fills its memory)."""

    def __init__(self, creators: int, megabytes: int, kind: str) -> None:
        self.kind = kind
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", CREATOR, str(megabytes << 20), kind],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(creators)
        ]
        for proc in self.procs:  # torch imported everywhere: the storm starts now
            if proc.stdout is None or proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a context creator did not start")

    def stop(self) -> int:
        """Contexts created since the start."""
        created = 0
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self.procs:
            out = proc.stdout.read() if proc.stdout is not None else ""
            proc.wait(timeout=60)
            created += int(out.split()[-1]) if out.split() else 0
        return created


def run_summary(protocol: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per runner: the run's median and p90 (seconds)."""
    return {name: {"median": s["median"], "p90": s["p90"]} for name, s in protocol["stats"].items()}


def compare(runs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, float]]:
    """Per runner: the median over the ``kind`` storm's runs of their medians (and p90s) over the
    same for the quiet runs; 1.0 means the storm did not move the timing."""
    quiet = [r for r in runs if r["storm"] is None]
    storm = [r for r in runs if r["storm"] == kind]
    out = {}
    for name in quiet[0]["runners"]:
        ratios = {}
        for stat in ("median", "p90"):
            q = statistics.median(r["runners"][name][stat] for r in quiet)
            s = statistics.median(r["runners"][name][stat] for r in storm)
            ratios[f"{stat}_ratio"] = round(s / q, 4)
        out[name] = ratios
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4096x4096x4096,256x256x256")
    parser.add_argument("--runs", type=int, default=3, help="quiet runs, and as many per storm")
    parser.add_argument("--creators", type=int, default=16)
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--device-seconds", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=Path("context-interference.json"))
    args = parser.parse_args(argv)

    from engine.gpu.environment import collect
    from engine.problem import Problem
    from engine.timing import measure

    shapes = []
    for shape in args.shapes.split(","):
        problem = Problem.parse(shape)
        session = measure.Session(problem)
        runs = []
        for index in range(len(STORMS) * args.runs):
            kind = STORMS[index % len(STORMS)]
            storm = Storm(args.creators, args.megabytes, kind) if kind else None
            started = time.monotonic()
            record = session.run(
                protocols=("device",),
                heat_seconds=1.0,
                device_seconds=args.device_seconds,
                probe_overhead=False,
            )
            seconds = time.monotonic() - started
            created = storm.stop() if storm is not None else 0
            runs.append(
                {
                    "storm": kind,
                    "seconds": round(seconds, 2),
                    "contexts_created": created,
                    "runners": run_summary(record["protocols"]["device"]),
                }
            )
            print(
                f"{problem}: {kind or 'quiet'} run, {seconds:.1f} s, {created} contexts created",
                flush=True,
            )
        ratios = {kind: compare(runs, kind) for kind in STORMS if kind}
        for kind, by_runner in ratios.items():
            for name, r in by_runner.items():
                print(
                    f"{problem} {name}: {kind}/quiet median {r['median_ratio']}, "
                    f"p90 {r['p90_ratio']}"
                )
        shapes.append({"problem": problem.key, "runs": runs, "storm_over_quiet": ratios})
    report = {
        "what": "device-protocol timing while other processes create CUDA contexts (issue 7)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "creators": args.creators,
        "megabytes": args.megabytes,
        "environment": collect().to_dict(),
        "shapes": shapes,
    }
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
