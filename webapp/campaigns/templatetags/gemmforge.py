"""Template filters: a same-session ratio with its verdict, and times beside TFLOP/s."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from webapp.campaigns.selectors import ShapeLine

register = template.Library()
CLASSES = {"faster": "win", "tied": "tie", "slower": "loss", "unmeasured": "unmeasured"}
MARKS = {"tied": " ≈", "unmeasured": " ?"}
UNMEASURED_TITLE = "no noise measured for this session's protocol and GPU: no verdict"


HOST_TIMED = (
    "host-timed: includes each call's launch and synchronisation overhead, so it is not a "
    "kernel speed"
)


@register.filter
def ratio(value: Any, host_timed: bool = False) -> str:
    """×1.023 coloured by its verdict (a Ratio, or its dict); an em dash where there is none.
    A host-timed ratio (``host_timed``) is never coloured as a win or a loss."""
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
    elif verdict == "unmeasured":
        title = UNMEASURED_TITLE
    elif data.get("noise"):
        title += f" ({data['noise']})"
    if host_timed:
        shown = f"{data['value']:.3f}"
        return format_html('<span class="host-timed" title="{}">×{}</span>', HOST_TIMED, shown)
    return format_html(
        '<span class="{}" title="{}">×{}{}</span>',
        CLASSES.get(verdict, ""),
        title,
        f"{data['value']:.3f}",
        MARKS.get(verdict, ""),
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


def _url(name: str, pk: Any) -> str:
    """reverse() once per URL name, then the id substituted (1000 rows, 2000 links)."""
    if name not in _URLS:
        _URLS[name] = reverse(name, args=[987654321])
    return _URLS[name].replace("987654321", str(pk))


_URLS: dict[str, str] = {}


def _value(value: Any) -> str:
    return "" if value is None else repr(float(value))


def _cell(baseline: str, value: float | None, verdict: str | None) -> str:
    """One ratio cell; a baseline key, numbers and a verdict from fixed sets only, so nothing
    to escape."""
    if value is None:
        return f'<td class="num" data-baseline="{baseline}" data-value="">—</td>'
    css = CLASSES.get(verdict or "", "")
    mark = MARKS.get(verdict or "", "")
    title = f' title="{UNMEASURED_TITLE}"' if verdict == "unmeasured" else ""
    return (
        f'<td class="num" data-baseline="{baseline}" data-value="{float(value)!r}">'
        f'<span class="{css}"{title}>×{value:.3f}{mark}</span></td>'
    )


def _text(value: str) -> str:
    """HTML-escaped (& < > " '), as django's escape() but without its lazy-string wrapper:
    the shape table escapes five strings a row."""
    return html.escape(str(value), quote=True)


def _shortened(text: str, length: int) -> str:
    """At most ``length`` characters, the last an ellipsis when cut (Truncator.chars() for the
    ASCII kernel names, at a tenth of its cost)."""
    return text if len(text) <= length else text[: length - 1] + "…"


@register.simple_tag
def shape_rows(lines: Iterable[ShapeLine], live: bool) -> str:
    """The leaderboard's rows, built in Python: at 1000 shapes the same markup as template tags
    took most of a 300 ms page budget. Every string from the database goes through _text()."""
    rows = []
    for p in lines:
        row = p.row
        if row["candidate"] is not None:
            kernel = (
                f'<a href="{_url("candidate-detail", int(row["candidate"]))}"><code class="small">'
                f"{_text(_shortened(row['kernel'] or '', 36))}</code></a>"
                f' <span class="muted small">({_text(row["session"] or "")})</span>'
            )
        else:
            kernel = '<span class="muted">none timed yet</span>'
        waits = ""
        if live:
            waits = (
                f'<td class="small" data-field="waiting">{_text(p.waiting or "—")}</td>'
                f'<td class="num" data-value="{_value(p.eta_s)}">{duration(p.eta_s)}</td>'
            )
        cells = "".join(_cell(b, value, verdict) for b, value, verdict in p.cells)
        tflops = "—" if row["tflops"] is None else f"{row['tflops']:.1f}"
        rows.append(
            f'<tr data-problem="{int(p.id)}"><th scope="row" class="shape-cell">'
            f'<a href="{_url("problem-detail", int(p.id))}"><code>{_text(p.shape)}</code></a> '
            f'<span class="muted small">{_text(p.layout.upper())}</span></th>{cells}'
            f'<td data-field="status_label">{_text(p.status_label)}</td>'
            f'<td class="num" data-field="candidates">{int(p.candidate_count)}</td>{waits}'
            f'<td>{kernel}</td><td class="num" data-value="{_value(row["seconds"])}">'
            f"{microseconds(row['seconds'])}</td>"
            f'<td class="num" data-value="{_value(row["tflops"])}">{tflops}</td></tr>'
        )
    return mark_safe("\n".join(rows))  # numbers, fixed markup and escaped strings only
