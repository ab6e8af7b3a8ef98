"""The dashboard's reads of engine.timing.ratios: every speedup a page, a download, the API or the
bundle shows is made here, from one candidate's stored timings, inside one measurement session.

A candidate's ``timings[protocol]`` holds up to two sessions:
- the search (or an imported sweep): ``median_s`` with the ``baselines`` timed in the same GPU
  step (best of each library's layouts), and ``p25``/``p75`` where the step kept them;
- ``final``: the final re-measurement (``seconds``, ``baselines``, ``gpu_environment``), where
  the campaign had one.
A ratio never divides one session's baseline by another's kernel time. Each shape's chosen kernel
(``Problem.best``) is refreshed from these whenever its candidates change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.timing.ratios import (
    REWARD_BASELINE,
    UNMEASURED,
    Choice,
    Headline,
    Ratio,
    Session,
    ShapeBest,
    Timing,
    baseline_timings,
    choose,
    headline,
    measured_spread,
    preferred,
)
from webapp.campaigns.models import BaselineResult, Campaign, Candidate, Problem
from webapp.workers.models import GpuEnvironment

BASELINES = [b.value for b in BaselineResult.Baseline]
BASELINE_LABELS = dict(BaselineResult.Baseline.choices)
HEADLINE_PROTOCOL = "device"


def gpu_names() -> dict[str, str]:
    """GpuEnvironment id, as sessions store it → its GPU's name (one query): where a session
    kept no quartiles, the spread measured on that GPU judges its ratios."""
    return {str(pk): name for pk, name in GpuEnvironment.objects.values_list("id", "name")}


def session_spread(protocol: str, environment: Any, gpus: Mapping[str, str] | None) -> float | None:
    """The run-to-run spread measured for ``protocol`` on the session's GPU (None: unknown)."""
    name = (gpus or {}).get(str(environment or ""), "")
    return measured_spread(protocol, name) if name else None


def candidate_sessions(
    timings: Mapping[str, Any], protocol: str, gpus: Mapping[str, str] | None = None
) -> list[Session]:
    """The sessions that timed the candidate in ``protocol`` (paired with baselines or not);
    ``gpus`` (gpu_names()) lets a session without quartiles use its GPU's measured spread."""
    entry = timings.get(protocol)
    if not isinstance(entry, Mapping):
        return []
    sessions = []
    search = Timing.of(
        {"seconds": entry.get("median_s"), "p25": entry.get("p25"), "p75": entry.get("p75")}
    )
    if search is not None:
        sessions.append(
            Session(
                name=str(entry.get("session") or "search"),
                protocol=protocol,
                kernel=search,
                baselines=baseline_timings(
                    with_baseline_quartiles(
                        entry.get("baselines") or {}, entry.get("baseline_quartiles") or {}
                    )
                ),
                environment=str(entry.get("gpu_environment") or ""),
                spread=session_spread(protocol, entry.get("gpu_environment"), gpus),
            )
        )
    final = entry.get("final")
    if isinstance(final, Mapping) and (kernel := Timing.of(final)) is not None:
        sessions.append(
            Session(
                name="final",
                protocol=protocol,
                kernel=kernel,
                baselines=baseline_timings(final.get("baselines") or {}),
                environment=str(final.get("gpu_environment") or ""),
                spread=session_spread(protocol, final.get("gpu_environment"), gpus),
            )
        )
    return sessions


def with_baseline_quartiles(
    baselines: Mapping[str, Any], kept: Mapping[str, Any]
) -> dict[str, Any]:
    """Baseline → {"seconds", "p25", "p75"} where the session kept the baseline's quartiles."""
    return {
        b: {"seconds": t, **kept[b]} if isinstance(kept.get(b), Mapping) else t
        for b, t in baselines.items()
    }


def candidate_session(
    timings: Mapping[str, Any], protocol: str, gpus: Mapping[str, str] | None = None
) -> Session | None:
    """The session the candidate's ratios in ``protocol`` are shown from (engine.timing.ratios)."""
    return preferred(candidate_sessions(timings, protocol, gpus))


def shown_ratios(
    timings: Mapping[str, Any], protocol: str, gpus: Mapping[str, str] | None = None
) -> tuple[Session | None, dict]:
    """(the session, baseline → Ratio) of a candidate in ``protocol``; ({} where unpaired)."""
    session = candidate_session(timings, protocol, gpus)
    return session, ({} if session is None else session.ratios())


def ratio_json(r: Ratio | None) -> dict[str, Any] | None:
    return None if r is None else r.to_dict()


# -- a shape's chosen kernel -------------------------------------------------------------------
def problem_choice(*, problem: Problem, protocol: str = HEADLINE_PROTOCOL) -> Choice | None:
    """The shape's kernel: engine.timing.ratios.choose over its verified candidates (one query)."""
    rows = (
        Candidate.objects.filter(problem=problem, status=Candidate.Status.DONE)
        .order_by("id")
        .values_list("id", "name", "timings")
    )
    gpus = gpu_names()
    return choose(
        [
            (name, cid, candidate_sessions(timings or {}, protocol, gpus))
            for cid, name, timings in rows
        ]
    )


def shown_speedup(status: str, timings: Mapping[str, Any], protocol: str) -> float | None:
    """A candidate's speedup over REWARD_BASELINE in ``protocol`` as every surface shows it."""
    if status != Candidate.Status.DONE:
        return None
    _, found = shown_ratios(timings, protocol)
    r = found.get(REWARD_BASELINE)
    return None if r is None else r.value


def candidates_refresh_speedup(*, problem: Problem, protocol: str) -> None:
    """Writes each candidate's shown speedup (Candidate.speedup) where it changed."""
    changed = []
    for row in Candidate.objects.filter(problem=problem).only("id", "status", "timings", "speedup"):
        value = shown_speedup(row.status, row.timings or {}, protocol)
        if value != row.speedup:
            row.speedup = value
            changed.append(row)
    Candidate.objects.bulk_update(changed, ["speedup"], batch_size=500)


def best_json(choice: Choice | None, problem: Problem) -> dict[str, Any]:
    if choice is None:
        return {}
    session = choice.session
    return {
        "candidate": choice.key,
        "name": choice.kernel,
        "session": session.to_dict(),
        "seconds": session.kernel.seconds,
        "tflops": problem.as_engine().flops / session.kernel.seconds / 1e12,
        "ratios": {b: r.to_dict() for b, r in session.ratios().items()},
    }


def problem_refresh_best(*, problem: Problem) -> None:
    """Stores the shape's chosen kernel and its same-session ratios on the problem, and each
    candidate's shown speedup."""
    candidates_refresh_speedup(problem=problem, protocol=problem.campaign.reward_protocol)
    best = best_json(problem_choice(problem=problem), problem)
    speedups = {b: r["value"] for b, r in best.get("ratios", {}).items()}
    if best != problem.best or speedups != problem.best_speedups:
        problem.best, problem.best_speedups = best, speedups
        problem.save(update_fields=["best", "best_speedups", "updated"])


def choice_of(best: Mapping[str, Any]) -> Choice | None:
    """The Choice a stored ``Problem.best`` describes."""
    session = Session.from_dict(best.get("session") or {}) if best else None
    if session is None:
        return None
    return Choice(str(best.get("name", "")), session, best.get("candidate"))


# -- the headline ------------------------------------------------------------------------------
def headline_of(rows: Iterable[tuple[int, int, int, str, Mapping[str, Any]]]) -> Headline:
    """The headline of shapes given as (m, n, k, layout, Problem.best)."""
    bests, without = [], 0
    for m, n, k, layout, best in rows:
        choice = choice_of(best or {})
        if choice is None:
            without += 1
        else:
            bests.append(ShapeBest(f"{m}x{n}x{k}_{layout}", 2.0 * m * n * k, choice))
    return headline(bests, protocol=HEADLINE_PROTOCOL, without=without, baselines=BASELINES)


def campaign_headline(*, campaign: Campaign) -> Headline:
    return headline_of(campaign.problems.values_list("m", "n", "k", "layout", "best"))


def campaign_headlines(*, campaign_ids: Sequence[int]) -> dict[int, Headline]:
    """Campaign id → headline, for a page of campaigns in one query."""
    rows: dict[int, list[tuple[int, int, int, str, Any]]] = {cid: [] for cid in campaign_ids}
    for cid, *row in Problem.objects.filter(campaign_id__in=campaign_ids).values_list(
        "campaign_id", "m", "n", "k", "layout", "best"
    ):
        rows[cid].append(tuple(row))  # type: ignore[arg-type]
    return {cid: headline_of(shape_rows) for cid, shape_rows in rows.items()}


def headline_context(h: Headline) -> dict[str, Any]:
    """What the headline template reads."""
    autotune = h.summary(REWARD_BASELINE)
    return {
        "h": h,
        "lines": [
            {"label": BASELINE_LABELS.get(s.baseline, s.baseline), **s.to_dict()}
            for s in h.baselines
        ],
        "main": None
        if autotune is None
        else {"label": BASELINE_LABELS[REWARD_BASELINE], **autotune.to_dict()},
        "unmeasured": any(s.counts.get(UNMEASURED) for s in h.baselines),
        "worst_shape": h.worst[0] if h.worst else "",
        "worst": h.worst[1] if h.worst else None,
        "best_shape": h.best[0] if h.best else "",
        "best_kernel": h.best[1] if h.best else "",
        "best_tflops": h.best[2] if h.best else None,
        "ceiling_tflops": h.ceiling[1] if h.ceiling else None,
        "ceiling_percent": None if h.ceiling_fraction is None else 100 * h.ceiling_fraction,
    }
