"""Template filters: a same-session ratio with its verdict, and times beside TFLOP/s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template
from django.utils.html import format_html

register = template.Library()
CLASSES = {"faster": "win", "tied": "tie", "slower": "loss"}


@register.filter
def ratio(value: Any) -> str:
    """×1.023 coloured by its verdict (a Ratio, or its dict); an em dash where there is none."""
    if value is None:
        return "—"
    data = value.to_dict() if hasattr(value, "to_dict") else value
    if not isinstance(data, Mapping) or data.get("value") is None:
        return "—"
    verdict = data.get("verdict") or ""
    low, high = data.get("low"), data.get("high")
    title = verdict
    if low is not None and high is not None:
        title += f" (interquartile interval {low:.3f}–{high:.3f})"
    return format_html(
        '<span class="{}" title="{}">×{}{}</span>',
        CLASSES.get(verdict, ""),
        title,
        f"{data['value']:.3f}",
        " ≈" if verdict == "tied" else "",
    )


@register.filter
def microseconds(seconds: Any) -> str:
    if not isinstance(seconds, int | float) or seconds <= 0:
        return "—"
    return f"{seconds * 1e6:.2f} µs"


@register.filter
def tflops(value: Any) -> str:
    if not isinstance(value, int | float) or value <= 0:
        return ""
    return f"{value:.1f} TFLOP/s"


@register.filter
def duration(seconds: Any) -> str:
    """An ETA: 42 s, 7 min, 2.5 h."""
    if not isinstance(seconds, int | float):
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
