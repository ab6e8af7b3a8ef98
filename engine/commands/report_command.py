"""``python -m engine report RESULTS.json ... --out DIR``: the published report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.publish import report

DEFAULT_ANCHORS = Path(__file__).resolve().parents[2].parent / "shared" / "anchors"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="speedup tables, size-class summaries and plots from GPU results"
    )
    parser.add_argument("results", type=Path, nargs="+", help="family sweeps and campaign JSON")
    parser.add_argument("--out", type=Path, required=True, help="folder for README.md, JSON, PNG")
    parser.add_argument(
        "--anchors",
        type=Path,
        default=DEFAULT_ANCHORS,
        help="CUDA-L2's published CSVs (default: ../shared/anchors beside the checkout)",
    )
    parser.add_argument(
        "--cublaslt-kernels",
        type=Path,
        help="bench/cublaslt_kernels.py's JSON: what cuBLASLt runs, for the shapes whose results "
        "do not record it",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    missing = [str(p) for p in args.results if not p.is_file()]
    if missing:
        raise SystemExit(f"error: no such results file: {', '.join(missing)}")
    try:
        results = report.load_results(args.results)
    except (ValueError, KeyError) as exc:
        raise SystemExit(f"error: {exc}") from None
    if not results:
        raise SystemExit("error: the files hold no timed shape")
    if args.cublaslt_kernels:
        try:
            filled = report.fill_cublaslt_kernels(results, args.cublaslt_kernels)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"error: {exc}") from None
        print(f"cuBLASLt's kernels: {filled} shapes named from {args.cublaslt_kernels}")
    summary = report.summarize(results)
    anchors = report.load_anchors(args.anchors) if args.anchors.is_dir() else {}
    comparison = report.anchor_comparison(results, anchors)
    peaks = report.gpu_peaks(args.results)
    limits = report.roofline(results, peaks) if peaks else None
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = report.gpu_name(args.results)
    headline = report.report_headline(results, gpu=gpu)
    payload = {
        "inputs": [str(p) for p in args.results],
        "headline": headline.to_dict(),
        "summary": summary,
        "roofline": limits,
        "shapes": report.to_json(results),
        "cuda_l2_comparison": comparison,
    }
    (args.out / "report.json").write_text(json.dumps(payload, indent=1))
    text = report.markdown(
        results,
        summary,
        comparison,
        environment=report.environment_line(args.results),
        limits=limits,
        gpu=gpu,
    )
    plots = report.write_plots(results, args.out)
    if plots:
        text += "\n" + "\n".join(f"![{p.stem}]({p.name})" for p in plots) + "\n"
    (args.out / "README.md").write_text(text)
    for protocol, s in summary.items():
        auto = s["baselines"]["cublaslt_autotune"]["all"]
        print(
            f"{protocol}: {s['shapes']} shapes, geomean {auto['geomean']:.3f}x over cuBLASLt "
            f"autotune, {auto['faster_fraction']:.0%} faster"
        )
    print("\n".join(headline.markdown(report.BASELINE_LABELS)))
    print(f"wrote {args.out / 'README.md'}")
    return 0
