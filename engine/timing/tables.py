"""A measurement record (engine.timing.measure) as text: the tables `engine bench` and the bench
scripts print."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.timing.baseline_names import TORCH_TUNED, tuned_label


def format_table(record: dict[str, Any]) -> str:
    p = record["problem"]
    lines = [f"\n{p['m']}x{p['n']}x{p['k']} ({p['layout']})  — {record['environment']['gpu_name']}"]
    for protocol, result in record["protocols"].items():
        stat = result["statistic"]
        lines.append(f"  {protocol} protocol ({stat} µs, TFLOP/s):")
        by_runner = result.get("power_by_runner", {})
        marks = runner_marks(result)
        # the runners that stand, fastest first, then the rejected and impossible ones, marked
        ordered = sorted(result["seconds"], key=lambda n: (n in marks, result["seconds"][n]))
        for name in ordered:
            t = result["seconds"][name]
            lines.append(
                f"    {name:28s} {t * 1e6:11.2f} µs {result['tflops'][name]:8.1f}"
                + power_label(by_runner.get(name))
                + (f"  {marks[name]}" if name in marks else "")
            )
        if "power" in result:
            lines.append(f"    during the run:{power_label(result['power'])}")
        for name, speedups in result["speedups"].items():
            parts = ", ".join(f"{b} {s:.3f}x" for b, s in speedups.items())
            lines.append(f"    speedup of {name}: {parts}")
        for name, rejection in sorted(result.get("rejections", {}).items()):
            lines.append(f"    rejected {name}: {rejection.get('message', '')}")
        if result["impossible"]:
            lines.append(f"    IMPOSSIBLE (below physical floor): {result['impossible']}")
    lines += tuning_lines(record.get("autotune", {}))
    if "prediction" in record and "device" in record["protocols"]:
        lines.append(prediction_line(record))
    return "\n".join(lines)


def runner_marks(result: dict[str, Any]) -> dict[str, str]:
    """Runner → why its time stands for nothing, for one protocol's result: rejected by the
    checks in the timed calls (engine.verify.timed_checks), or faster than the physical floor."""
    marks = {name: rejection_mark(result, name) for name in result.get("rejected_while_timed", ())}
    floor = result.get("floor_seconds")
    for name in result.get("impossible", ()):
        below = f" of {floor * 1e6:.2f} µs" if floor else ""
        marks.setdefault(name, f"IMPOSSIBLE (below the physical floor{below})")
    return marks


def rejection_mark(result: dict[str, Any], name: str) -> str:
    """``REJECTED (unwritten: 8 of 9 checked calls)``; a stream escape, found by the probes,
    has no count: ``REJECTED (stream_escape)``."""
    rejection = result.get("rejections", {}).get(name, {})
    reason = str(rejection.get("reason", "rejected while timed"))
    checks = result.get("timed_checks", {}).get("records", {}).get("checks", {}).get(name, [])
    failed = sum(1 for c in checks if c.get("reason") == reason)
    if failed:
        return f"REJECTED ({reason}: {failed} of {len(checks)} checked calls)"
    return f"REJECTED ({reason})"


def rejected_runners(record: dict[str, Any], names: Iterable[str]) -> dict[str, str]:
    """Of ``names`` (a bench's candidates), those rejected or impossible in any protocol of
    ``record``, with the first protocol's mark: ``{name: "device: REJECTED (...)"}``."""
    wanted = set(names)
    out: dict[str, str] = {}
    for protocol, result in record["protocols"].items():
        for name, mark in runner_marks(result).items():
            if name in wanted:
                out.setdefault(name, f"{protocol}: {mark}")
    return out


def prediction_line(record: dict[str, Any]) -> str:
    """The floor model's prediction beside the fastest device-protocol baseline."""
    pred = record["prediction"]
    best = record["protocols"]["device"].get("best_baselines", {})
    line = f"  floor model: {pred['seconds'] * 1e6:.2f} µs ({pred['bound']}-bound)"
    if best:
        name = min(best, key=lambda b: best[b]["seconds"])
        seconds = best[name]["seconds"]
        line += (
            f"; fastest baseline {name} {seconds * 1e6:.2f} µs = {seconds / pred['seconds']:.2f}x"
        )
    return line


def power_label(summary: dict[str, Any] | None) -> str:
    """`` 612 W 1755 MHz`` (NVML means), or '' where nothing was read."""
    if not summary:
        return ""
    parts = []
    if "power_w" in summary:
        parts.append(f"{summary['power_w']['mean']:5.0f} W")
    if "sm_clock_mhz" in summary:
        parts.append(f"{summary['sm_clock_mhz']['mean']:5.0f} MHz")
    if summary.get("power_capped_fraction"):
        parts.append(f"capped {summary['power_capped_fraction']:.0%}")
    return "  " + " ".join(parts) if parts else ""


def tuning_lines(reports: dict[str, Any]) -> list[str]:
    """What the torch-tuned baselines picked and how long they tuned."""
    lines = []
    for name, report in sorted(reports.items()):
        if not name.startswith(TORCH_TUNED) or "tuning_seconds" not in report:
            continue
        label = tuned_label(report) or "nothing recorded"
        timed = f"; {len(report['choices'])} choices timed" if report.get("choices") else ""
        lines.append(f"  {name}: tuned {report['tuning_seconds']:.2f} s, ran {label}{timed}")
    return lines
