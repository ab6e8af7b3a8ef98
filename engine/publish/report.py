"""The published report: per-shape speedups of gemmforge's best verified kernel over the four
NVIDIA baselines, summaries per size class, plots, and CUDA-L2's published ratios beside ours.

Inputs are the JSON the GPU runs write: family sweeps (bench/family_sweep.py: device protocol)
and campaign results (``python -m engine optimize``: its ``final`` section re-measures each
shape's top kernels in a fresh process in the device, offline and server protocols). Where both
give a (shape, protocol), the campaign's final re-measurement is used: its runs are longer and
its kernels were not selected on those very samples.

Speedup = baseline time / kernel time (> 1: gemmforge is faster); a baseline's time is the faster
of its NN and TN calls. Size classes by log2(M·N·K): small < 30 (below 1024³), medium 30–35,
large ≥ 36 (4096³ and above).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.outcomes import Reason
from engine.problem import Problem
from engine.timing import physics
from engine.timing.baseline_names import BASELINES, INDUCTOR, TUNABLEOP
from engine.timing.baselines import best_of_layouts
from engine.timing.ratios import (
    Choice,
    Headline,
    Session,
    ShapeBest,
    Timing,
    baseline_runner,
    headline,
)

PROTOCOLS = ("device", "offline", "server")
SIZE_CLASSES = ("small", "medium", "large")
LAYOUT_GROUPS = ("NN", "TN")  # summarised apart when a report has both
LARGE_LOG2_MNK = 36
ANCHOR_COLUMNS = {
    "torch": "torch.matmul",
    "cublas": "cuBLAS-max",
    "cublaslt_heuristic": "cuBLASLt-heuristic-max",
    "cublaslt_autotune": "cuBLASLt-auto-tuning-max",
}
BASELINE_LABELS = {
    "torch": "torch.matmul",
    "cublas": "cuBLAS",
    "cublaslt_heuristic": "cuBLASLt heuristic",
    "cublaslt_autotune": "cuBLASLt autotuned",
    INDUCTOR: "Inductor max-autotune",
    TUNABLEOP: "TunableOp",
}
SHORT_LABELS = {  # the per-shape table's columns
    "torch": "torch",
    "cublas": "cuBLAS",
    "cublaslt_heuristic": "Lt heuristic",
    "cublaslt_autotune": "Lt autotune",
    INDUCTOR: "Inductor",
    TUNABLEOP: "TunableOp",
}


@dataclass
class ProtocolPoint:
    """The best verified kernel of one shape in one protocol, with the baselines beside it."""

    kernel: str
    seconds: float
    baselines: dict[str, float]  # best-of-layouts seconds per baseline
    source: str
    cublaslt_kernel: str | None = None  # what cuBLASLt-autotune ran, where the run recorded it
    kernel_quartiles: dict[str, float] = field(default_factory=dict)  # p25, p75 where kept
    baseline_quartiles: dict[str, dict[str, float]] = field(default_factory=dict)

    def speedups(self) -> dict[str, float]:
        return {b: t / self.seconds for b, t in self.baselines.items()}


@dataclass
class ShapeResult:
    problem: Problem
    points: dict[str, ProtocolPoint] = field(default_factory=dict)

    @property
    def log2_mnk(self) -> float:
        return math.log2(self.problem.m * self.problem.n * self.problem.k)

    @property
    def size_class(self) -> str:
        return size_class(self.problem.m, self.problem.n, self.problem.k)


def size_class(m: int, n: int, k: int) -> str:
    """small (MNK < 2^30), medium, or large (MNK ≥ 2^LARGE_LOG2_MNK)."""
    log2_mnk = math.log2(m * n * k)
    if log2_mnk < 30:
        return "small"
    return "large" if log2_mnk >= LARGE_LOG2_MNK else "medium"


def problem_of(key: str) -> Problem:
    shape, layout = key.rsplit("_", 1)
    return Problem.parse(shape, layout)


def best_point(
    seconds: dict[str, float], candidates: Iterable[str], source: str
) -> ProtocolPoint | None:
    """The fastest of ``candidates`` against the best-of-layout baselines in ``seconds``."""
    timed = {n: seconds[n] for n in candidates if seconds.get(n)}
    if not timed:
        return None
    kernel = min(timed, key=timed.__getitem__)
    baselines = {b: v["seconds"] for b, v in best_of_layouts(seconds).items()}
    return ProtocolPoint(kernel, timed[kernel], baselines, source)


def points_from_sweep(report: dict[str, Any], source: str) -> dict[str, dict[str, ProtocolPoint]]:
    verified = {n for n, e in report.get("configs", {}).items() if e.get("verify") == Reason.OK}
    out: dict[str, dict[str, ProtocolPoint]] = {}
    for row in report.get("sweep", []):
        rejected = set(row.get("rejected_while_timed", ()))
        point = best_point(row["seconds"], verified - rejected, source)
        if point is not None:
            out.setdefault(row["problem"], {})["device"] = point
    return out


def points_from_campaign(
    report: dict[str, Any], source: str
) -> dict[str, dict[str, ProtocolPoint]]:
    """Per shape, the kernel fastest in the final's device protocol (else in its first protocol)
    and that same kernel's point in every protocol that timed it: one kernel per shape."""
    out: dict[str, dict[str, ProtocolPoint]] = {}
    for key, final in report.get("final", {}).items():
        protocols = final.get("protocols", {})
        timed = {protocol: final_times(summary) for protocol, summary in protocols.items()}
        chooser = "device" if timed.get("device") else next((p for p in timed if timed[p]), None)
        if chooser is None:
            continue
        kernel = min(timed[chooser], key=timed[chooser].__getitem__)
        for protocol, summary in protocols.items():
            if kernel not in timed[protocol]:
                continue
            baselines = {b: v["seconds"] for b, v in summary["best_baselines"].items()}
            kept = summary.get("quartiles") or {}
            out.setdefault(key, {})[protocol] = ProtocolPoint(
                kernel,
                timed[protocol][kernel],
                baselines,
                f"{source} (final)",
                autotuned_kernel(final, summary["best_baselines"]),
                kernel_quartiles=dict(kept.get(kernel) or {}),
                baseline_quartiles={
                    b: dict(kept[runner])
                    for b, v in summary["best_baselines"].items()
                    if (runner := baseline_runner(b, v)) in kept
                },
            )
    return out


def final_times(summary: dict[str, Any]) -> dict[str, float]:
    """Kernel → its time in one protocol of a final, the kernels rejected while timed left out."""
    rejected = set(summary.get("rejected_while_timed", ()))
    return {n: summary["seconds"][n] for n in summary["speedups"] if n not in rejected}


def autotuned_kernel(final: dict[str, Any], best_baselines: dict[str, Any]) -> str | None:
    """The label of the kernel cuBLASLt-autotune ran in its faster layout (the heuristic's first
    choice where that stood in for the autotuned pick); None where the run did not record it."""
    best = best_baselines.get("cublaslt_autotune", {})
    if "layout" not in best:
        return None
    kernels = final.get("cublaslt_kernels", {}).get(f"cublaslt_autotune_{best['layout']}", {})
    which = "heuristic" if best.get("choice") == "heuristic" else "autotune"
    kernel = kernels.get(which) or kernels.get("autotune")
    return kernel.get("label") if kernel else None


def load_results(paths: Sequence[Path]) -> dict[str, ShapeResult]:
    """Shape key → result; campaign finals override sweep points of the same protocol."""
    sweeps: list[dict[str, dict[str, ProtocolPoint]]] = []
    finals: list[dict[str, dict[str, ProtocolPoint]]] = []
    for path in paths:
        report = json.loads(Path(path).read_text())
        if "final" in report or "problems" in report:
            finals.append(points_from_campaign(report, Path(path).name))
        elif "sweep" in report:
            sweeps.append(points_from_sweep(report, Path(path).name))
        else:
            raise ValueError(f"{path}: neither a family sweep nor a campaign result")
    results: dict[str, ShapeResult] = {}
    for layer, final in [(x, False) for x in sweeps] + [(x, True) for x in finals]:
        for key, points in layer.items():
            result = results.setdefault(key, ShapeResult(problem_of(key)))
            for protocol, point in points.items():
                earlier = result.points.get(protocol)
                if final or earlier is None or _autotune(point) > _autotune(earlier):
                    result.points[protocol] = point
    for result in results.values():
        one_kernel(result)
    return dict(sorted(results.items(), key=lambda kv: (kv[1].log2_mnk, kv[0])))


def one_kernel(result: ShapeResult) -> None:
    """Keeps only the points of the kernel chosen in the device protocol: crediting each
    protocol's best kernel apart would credit a shape with the best of several kernels."""
    device = result.points.get("device")
    if device is None:
        return
    for protocol in [p for p, point in result.points.items() if point.kernel != device.kernel]:
        del result.points[protocol]


def shape_bests(
    results: dict[str, ShapeResult], protocol: str = "device", gpu: str = ""
) -> list[ShapeBest]:
    """Each shape's point in ``protocol`` as the campaign headline reads it
    (engine.timing.ratios); ``gpu``: the GPU it was measured on, whose measured spread judges
    the points that kept no quartiles."""
    bests = []
    for key, result in results.items():
        point = result.points.get(protocol)
        if point is None:
            continue
        session = Session(
            name="final" if point.source.endswith("(final)") else "sweep",
            protocol=protocol,
            kernel=Timing.of({"seconds": point.seconds, **point.kernel_quartiles})
            or Timing(point.seconds),
            baselines={
                b: Timing.of({"seconds": t, **point.baseline_quartiles.get(b, {})}) or Timing(t)
                for b, t in point.baselines.items()
            },
            environment=gpu,
        )
        bests.append(ShapeBest(key, float(result.problem.flops), Choice(point.kernel, session)))
    return bests


def report_headline(results: dict[str, ShapeResult], gpu: str = "") -> Headline:
    """The campaign headline in the device protocol (what the dashboard shows at the top)."""
    bests = shape_bests(results, gpu=gpu)
    return headline(bests, without=len(results) - len(bests))


def _autotune(point: ProtocolPoint) -> float:
    return point.speedups().get("cublaslt_autotune", 0.0)


def geomean(values: Sequence[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def summarize(results: dict[str, ShapeResult]) -> dict[str, Any]:
    """Per protocol and baseline: geomean, mean, fraction faster, overall, per size class and,
    when both layouts are there, per layout; and the large shapes under 0.98 against
    cuBLASLt-autotune (the floor a campaign must clear)."""
    summary: dict[str, Any] = {}
    by_layout = len({r.problem.layout for r in results.values()}) > 1
    for protocol in PROTOCOLS:
        rows = [(r, r.points[protocol]) for r in results.values() if protocol in r.points]
        if not rows:
            continue
        by_baseline: dict[str, Any] = {}
        for baseline in BASELINES:
            groups: dict[str, list[float]] = {"all": []}
            for result, point in rows:
                speedup = point.speedups().get(baseline)
                if speedup is None:
                    continue
                groups["all"].append(speedup)
                groups.setdefault(result.size_class, []).append(speedup)
                if by_layout:
                    groups.setdefault(result.problem.layout.value.upper(), []).append(speedup)
            by_baseline[baseline] = {
                group: {
                    "shapes": len(values),
                    "geomean": geomean(values),
                    "mean": statistics.fmean(values),
                    "faster_fraction": sum(v > 1 for v in values) / len(values),
                }
                for group, values in groups.items()
                if values
            }
        large_below = sorted(
            key
            for key, r in results.items()
            if protocol in r.points
            and r.size_class == "large"
            and r.points[protocol].speedups().get("cublaslt_autotune", 0) < 0.98
        )
        summary[protocol] = {
            "shapes": len(rows),
            "baselines": by_baseline,
            "large_below_0.98_vs_autotune": large_below,
            "deficit_vs_autotune": deficit(
                {key: r.points[protocol] for key, r in results.items() if protocol in r.points}
            ),
        }
    return summary


DEFICIT_SHOWN = 12


def deficit(points: dict[str, ProtocolPoint]) -> dict[str, Any]:
    """Where the geomean over cuBLASLt-autotune is lost: each slower shape's share of the sum of
    log speedups below 1 (the geomean is exp of their mean), most first; the ``DEFICIT_SHOWN``
    largest, and what would change if each of them were brought to 1.0."""
    speedups = {key: s for key, p in points.items() if (s := _autotune(p)) > 0}
    losses = sorted((math.log(s), key) for key, s in speedups.items() if s < 1)
    total = sum(value for value, _ in losses)
    shown = []
    cumulative = 0.0
    for value, key in losses[:DEFICIT_SHOWN]:
        cumulative += value
        shown.append(
            {
                "problem": key,
                "speedup": math.exp(value),
                "share": value / total,
                "cumulative_share": cumulative / total,
            }
        )
    shown_keys = {row["problem"] for row in shown}
    lifted = [1.0 if key in shown_keys else s for key, s in speedups.items()]
    return {
        "slower_shapes": len(losses),
        "shapes": shown,
        "geomean": geomean(list(speedups.values())),
        "geomean_if_shown_reached_1": geomean(lifted),
    }


def load_anchors(directory: Path, gpu: str = "h100") -> dict[str, dict[str, dict[str, float]]]:
    """CUDA-L2's published ratios: protocol → "MxNxK" → baseline → ratio (fp32 accumulation)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for protocol in ("offline", "server"):
        path = directory / f"cuda_l2_{gpu}_F32F16F16F32_speedup_{protocol}.csv"
        if not path.is_file():
            continue
        table: dict[str, dict[str, float]] = {}
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                shape = row["mnk"].replace("_", "x")
                table[shape] = {b: float(row[col]) for b, col in ANCHOR_COLUMNS.items()}
        out[protocol] = table
    return out


def anchor_comparison(
    results: dict[str, ShapeResult], anchors: dict[str, dict[str, dict[str, float]]]
) -> list[dict[str, Any]]:
    """Our ratio beside CUDA-L2's (their H100, our H200) for shapes both measured."""
    rows = []
    for key, result in results.items():
        shape = result.problem.shape
        for protocol, table in anchors.items():
            if shape in table and protocol in result.points:
                ours = result.points[protocol].speedups()
                rows.append(
                    {
                        "problem": key,
                        "protocol": protocol,
                        "ours": {b: ours.get(b) for b in ANCHOR_COLUMNS},
                        "cuda_l2_h100": table[shape],
                    }
                )
    return rows


def roofline(
    results: dict[str, ShapeResult], peaks: physics.GpuPeaks, protocol: str = "device"
) -> dict[str, Any]:
    """How close the times come to the GPU's datasheet limits: per size class, the median over
    shapes of floor / time (engine.timing.physics.floor_seconds: the FLOPs at the peak tensor rate
    or the operand bytes at the peak HBM rate, whichever is longer), for gemmforge's best kernel and
    for cuBLASLt-autotune. 1.0 is the roof; a device-protocol time also holds the launch."""
    fractions: dict[str, dict[str, list[float]]] = {}
    for result in results.values():
        point = result.points.get(protocol)
        if point is None:
            continue
        floor = physics.floor_seconds(result.problem, peaks)
        group = fractions.setdefault(result.size_class, {"gemmforge": [], "cublaslt_autotune": []})
        group["gemmforge"].append(floor / point.seconds)
        if (autotune := point.baselines.get("cublaslt_autotune")) is not None:
            group["cublaslt_autotune"].append(floor / autotune)
    classes = {
        name: {
            "shapes": len(fractions[name]["gemmforge"]),
            **{who: statistics.median(v) for who, v in fractions[name].items() if v},
        }
        for name in SIZE_CLASSES
        if name in fractions
    }
    return {"gpu": peaks.name, "protocol": protocol, "classes": classes}


def roofline_lines(r: dict[str, Any]) -> list[str]:
    if not r["classes"]:
        return []
    lines = [
        f"## How close to the {r['gpu']}'s limits ({r['protocol']} protocol)",
        "",
        "Median over each class's shapes of the roofline floor / the time: the floor is the "
        "FLOPs at the datasheet's dense fp16 tensor rate or A, B and C at its HBM rate, "
        "whichever takes longer (1.0 is the roof; a device-protocol time also holds the "
        "launch).",
        "",
        "| class | shapes | gemmforge | cuBLASLt autotuned |",
        "|---|---|---|---|",
    ]
    for name, row in r["classes"].items():
        lines.append(
            f"| {name} | {row['shapes']} | {_fmt(row.get('gemmforge'))} | "
            f"{_fmt(row.get('cublaslt_autotune'))} |"
        )
    return [*lines, ""]


def to_json(results: dict[str, ShapeResult]) -> dict[str, Any]:
    out = {}
    for key, result in results.items():
        out[key] = {
            "log2_mnk": result.log2_mnk,
            "size_class": result.size_class,
            "protocols": {
                protocol: {
                    "kernel": point.kernel,
                    "seconds": point.seconds,
                    "tflops": 2
                    * result.problem.m
                    * result.problem.n
                    * result.problem.k
                    / point.seconds
                    / 1e12,
                    "baselines": point.baselines,
                    "speedups": point.speedups(),
                    "source": point.source,
                    "cublaslt_kernel": point.cublaslt_kernel,
                }
                for protocol, point in result.points.items()
            },
        }
    return out


def deficit_lines(d: dict[str, Any]) -> list[str]:
    if not d["shapes"]:
        return []
    lines = [
        f"Where the geomean over cuBLASLt-autotune is lost: {d['slower_shapes']} shapes are "
        f"below 1.0 (ties within the noise among them); the {len(d['shapes'])} that lose most, "
        "with their share of the loss (of the sum of log speedups below 1). Brought to 1.0, these "
        f"alone would move the geomean from {_fmt(d['geomean'])} to "
        f"{_fmt(d['geomean_if_shown_reached_1'])}.",
        "",
        "| shape | vs Lt autotune | share | cumulative |",
        "|---|---|---|---|",
    ]
    for row in d["shapes"]:
        lines.append(
            f"| {row['problem']} | {row['speedup']:.3f} | {row['share']:.0%} | "
            f"{row['cumulative_share']:.0%} |"
        )
    return [*lines, ""]


def fill_cublaslt_kernels(results: dict[str, ShapeResult], path: Path) -> int:
    """Where a shape's device point does not say what cuBLASLt-autotune ran, the kernel
    bench/cublaslt_kernels.py named for the problem: its autotuned pick where it tuned it, else
    the heuristic's first choice, marked so. Returns how many points it filled."""
    kernels = json.loads(Path(path).read_text()).get("kernels")
    if not isinstance(kernels, dict):
        raise ValueError(f"{path}: no 'kernels' (bench/cublaslt_kernels.py's JSON)")
    filled = 0
    for key, result in results.items():
        point = result.points.get("device")
        entry = kernels.get(key) or {}
        if point is None or point.cublaslt_kernel:
            continue
        if entry.get("autotune"):
            point.cublaslt_kernel = f"{entry['autotune']['label']} (tuned apart)"
        elif entry.get("heuristic") and entry["heuristic"][0]:
            point.cublaslt_kernel = f"{entry['heuristic'][0]['label']} (heuristic's first)"
        else:
            continue
        filled += 1
    return filled


def kernel_pair_lines(results: dict[str, ShapeResult]) -> list[str]:
    """Our best kernel beside the one cuBLASLt-autotune ran, per shape (device protocol), where
    the run recorded cuBLASLt's choice."""
    rows = [
        (key, point)
        for key, result in results.items()
        if (point := result.points.get("device")) is not None and point.cublaslt_kernel
    ]
    if not rows:
        return []
    lines = [
        "## Beside the kernel cuBLASLt-autotune ran (device protocol)",
        "",
        "cuBLASLt's algorithm as its configuration names it, in our orientation (tile M×N×K of "
        "the row-major C, cluster M×N, stages; `s?`: left to cuBLASLt).",
        "",
        "| shape | vs Lt autotune | gemmforge kernel | cuBLASLt kernel |",
        "|---|---|---|---|",
    ]
    for key, point in rows:
        lines.append(
            f"| {key} | {_fmt(point.speedups().get('cublaslt_autotune'))} | `{point.kernel}` | "
            f"{point.cublaslt_kernel} |"
        )
    return [*lines, ""]


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(
    results: dict[str, ShapeResult],
    summary: dict[str, Any],
    comparison: list[dict[str, Any]],
    *,
    environment: str,
    limits: dict[str, Any] | None = None,
    gpu: str = "",
) -> str:
    lines = [
        "# gemmforge report",
        "",
        f"{environment}",
        "",
        "Speedup = baseline time / gemmforge time (> 1: gemmforge faster), both taken in the",
        "same session; each baseline is the faster of its NN and TN calls. One kernel per shape,",
        "chosen in the device protocol, in every protocol. Generated by `python -m engine report`.",
        "",
        "## Headline",
        "",
        *report_headline(results, gpu=gpu).markdown(BASELINE_LABELS),
    ]
    for protocol, s in summary.items():
        auto = s["baselines"]["cublaslt_autotune"]
        lines += [
            f"## {protocol} protocol ({s['shapes']} shapes)",
            "",
            "| vs | class | shapes | geomean | mean | faster |",
            "|---|---|---|---|---|---|",
        ]
        for baseline, groups in s["baselines"].items():
            for group in ("all", *SIZE_CLASSES, *LAYOUT_GROUPS):
                if group in groups:
                    g = groups[group]
                    lines.append(
                        f"| {BASELINE_LABELS[baseline]} | {group} | {g['shapes']} | "
                        f"{_fmt(g['geomean'])} | {_fmt(g['mean'])} | "
                        f"{g['faster_fraction']:.0%} |"
                    )
        lines += [
            "",
            f"Geomean over cuBLASLt-autotune: **{_fmt(auto['all']['geomean'])}**; large shapes "
            f"(MNK ≥ 2^36) below 0.98: {', '.join(s['large_below_0.98_vs_autotune']) or 'none'}.",
            "",
            *deficit_lines(s["deficit_vs_autotune"]),
        ]
    lines += roofline_lines(limits) if limits else []
    lines += kernel_pair_lines(results)
    lines += [
        "## Per shape",
        "",
        "| shape | protocol | kernel | µs | TFLOP/s | "
        + " | ".join(SHORT_LABELS[b] for b in BASELINES)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(BASELINES),
    ]
    for key, result in results.items():
        for protocol, point in result.points.items():
            s = point.speedups()
            flops = 2 * result.problem.m * result.problem.n * result.problem.k
            lines.append(
                f"| {key} | {protocol} | `{point.kernel}` | {point.seconds * 1e6:.2f} | "
                f"{flops / point.seconds / 1e12:.1f} | "
                + " | ".join(_fmt(s.get(b)) for b in BASELINES)
                + " |"
            )
    if comparison:
        lines += [
            "",
            "## Beside CUDA-L2's published H100 ratios (different GPU: read with care)",
            "",
            "| shape | protocol | ours vs Lt autotune | CUDA-L2 vs Lt autotune | ours vs torch | "
            "CUDA-L2 vs torch |",
            "|---|---|---|---|---|---|",
        ]
        for row in comparison:
            lines.append(
                f"| {row['problem']} | {row['protocol']} | "
                f"{_fmt(row['ours']['cublaslt_autotune'])} | "
                f"{_fmt(row['cuda_l2_h100']['cublaslt_autotune'])} | "
                f"{_fmt(row['ours']['torch'])} | {_fmt(row['cuda_l2_h100']['torch'])} |"
            )
    return "\n".join(lines) + "\n"


def write_plots(results: dict[str, ShapeResult], out: Path) -> list[Path]:
    """speedup-vs-size.png (device protocol, each baseline) and heatmap.png (vs cuBLASLt
    autotune over (M, N) at the most common K); [] when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    device = [(r, r.points["device"]) for r in results.values() if "device" in r.points]
    if not device:
        return []
    written = []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for baseline in BASELINES:
        xs = [r.log2_mnk for r, _ in device]
        ys = [p.speedups().get(baseline, math.nan) for _, p in device]
        ax.scatter(xs, ys, label=BASELINE_LABELS[baseline], s=18)
    ax.axhline(1.0, color="grey", linestyle=":")
    ax.set_xlabel("log2(M·N·K)")
    ax.set_ylabel("speedup (baseline / gemmforge)")
    ax.set_title("gemmforge best verified kernel, device protocol")
    ax.legend()
    fig.tight_layout()
    path = out / "speedup-vs-size.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    layouts = [r.problem.layout for r, _ in device]
    layout = max(set(layouts), key=layouts.count)
    ks = [r.problem.k for r, _ in device if r.problem.layout is layout]
    k = max(set(ks), key=ks.count)
    cells = {
        (r.problem.m, r.problem.n): p.speedups().get("cublaslt_autotune")
        for r, p in device
        if r.problem.k == k and r.problem.layout is layout
    }
    ms = sorted({m for m, _ in cells})
    ns = sorted({n for _, n in cells})
    grid = [[cells.get((m, n), math.nan) or math.nan for n in ns] for m in ms]
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(ns), 1.2 + 0.7 * len(ms)))
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.5, vmax=1.5, origin="lower")
    ax.set_xticks(range(len(ns)), [str(n) for n in ns])
    ax.set_yticks(range(len(ms)), [str(m) for m in ms])
    ax.set_xlabel("N")
    ax.set_ylabel("M")
    ax.set_title(f"vs cuBLASLt autotuned, K={k}, {layout.value.upper()}")
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            if not math.isnan(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    path = out / "heatmap.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written


def environments(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Every measurement's recorded environment in the files, in order."""
    envs: list[dict[str, Any]] = []
    for path in paths:
        report = json.loads(Path(path).read_text())
        found = [row.get("environment") for row in report.get("sweep", [])]
        found += [final.get("environment") for final in report.get("final", {}).values()]
        envs += [env for env in found if env]
    return envs


def gpu_name(paths: Sequence[Path]) -> str:
    """The GPU the first measurement in the files names ("" when none does)."""
    names = [env["gpu_name"] for env in environments(paths) if env.get("gpu_name")]
    return str(names[0]) if names else ""


def gpu_peaks(paths: Sequence[Path]) -> physics.GpuPeaks | None:
    """The datasheet limits of the GPU the first measurement names; None when unknown."""
    names = [env["gpu_name"] for env in environments(paths) if env.get("gpu_name")]
    peaks = physics.peaks_for(names[0]) if names else physics.UNKNOWN
    return None if peaks is physics.UNKNOWN else peaks


def environment_line(paths: Sequence[Path]) -> str:
    """GPU, driver, CUDA and library versions of the first measurement found, and the dates of
    all of them (a report can combine runs of several days)."""
    envs = environments(paths)
    if not envs:
        return "environment not recorded"
    env = envs[0]
    days = sorted({e["recorded_at"][:10] for e in envs if e.get("recorded_at")}) or ["?"]
    when = days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"
    return (
        f"{env.get('gpu_name')}, driver {env.get('driver')}, CUDA "
        f"{env.get('cuda_runtime')}, cuBLASLt {env.get('cublaslt_version')}, CUTLASS "
        f"{env.get('cutlass_version')}, torch {env.get('torch_version')}, nvcc "
        f"{env.get('nvcc_version')}; measured {when}."
    )
