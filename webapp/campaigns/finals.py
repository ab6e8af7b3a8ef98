"""A shape's finals on its candidates: one function for both ways a final reaches the database,
the import of a recorded campaign's report (webapp.campaigns.database_imports) and a live
campaign's finals step (webapp.campaigns.runner.final_step).

A final section is engine.execution.final's summary of one shape: its baselines and top kernels
re-measured per protocol with the GPU environment, each top kernel's compute-sanitizer verdict
(``sanitize``), the kernels rejected while timed, or ``{"error": why}`` when no kernel could be
re-measured. The baselines become BaselineResult rows, each top kernel's time its ``final``
session, the verdicts its ``verification_result``; a kernel that failed them is REJECTED, so it
never becomes the shape's best.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.execution.final import final_choice, no_choice_reason
from engine.timing.baseline_names import tuned_label
from engine.timing.ratios import baseline_runner, with_quartiles
from webapp.campaigns.imports import BASELINES, environment_record, import_baselines
from webapp.campaigns.models import Candidate, Problem
from webapp.campaigns.ratios import problem_refresh_best

BASELINE_KEYS = {f"{b}_{v}" for b in BASELINES for v in ("nn", "tn")}


def problem_apply_final(*, problem: Problem, section: Mapping[str, Any]) -> int:
    """Stores one shape's final section (see the module docstring) and refreshes the shape's
    chosen kernel; ``Problem.final_error`` says why the final chose no kernel, and
    ``Problem.cublaslt_kernels`` keeps the cuBLASLt algorithms its baselines ran (the bundle pins
    autotune's). Returns how many baseline timings it stored."""
    candidates_apply_final_verdicts(problem=problem, section=section)
    choice = final_choice(dict(section))
    final_error = "" if choice is not None else no_choice_reason(dict(section))
    picked = section.get("cublaslt_kernels")
    cublaslt_kernels = dict(picked) if isinstance(picked, Mapping) else {}
    if (final_error, cublaslt_kernels) != (problem.final_error, problem.cublaslt_kernels):
        problem.final_error, problem.cublaslt_kernels = final_error, cublaslt_kernels
        problem.save(update_fields=["final_error", "cublaslt_kernels", "updated"])
    count = 0
    if isinstance(section.get("environment"), Mapping):  # a time means nothing without its GPU
        count = final_timings_apply(problem=problem, section=section)
    problem_refresh_best(problem=problem)
    return count


def final_timings_apply(*, problem: Problem, section: Mapping[str, Any]) -> int:
    """The final's baselines per protocol as BaselineResult rows, and each top kernel's time
    (not one rejected while timed) as its ``final`` session. Returns the baseline count."""
    from engine.timing.baselines import best_of_layouts  # imports torch: not in the web process

    count = 0
    environment = environment_record(dict(section["environment"]))
    for protocol, result in (section.get("protocols") or {}).items():
        seconds = dict(result.get("seconds") or {})
        statistic = result.get("statistic", "median")
        count += import_baselines(
            problem,
            seconds,
            environment,
            protocol=protocol,
            kernels={**cublaslt_kernel_labels(section), **torch_baseline_labels(section)},
            statistic=statistic,
        )
        kernels = {n: s for n, s in seconds.items() if n not in BASELINE_KEYS}
        rejected = set(result.get("rejected_while_timed") or ())
        # the baselines of this very session, by the rule the engine's summary used, with
        # each runner's interquartile range where the final kept it
        kept = dict(result.get("quartiles") or {})
        baselines = {
            b: with_quartiles(v["seconds"], baseline_runner(b, v), kept)
            for b, v in best_of_layouts(seconds).items()
        }
        baselines = {b: t if len(t) > 1 else t["seconds"] for b, t in baselines.items()}
        for candidate in Candidate.objects.filter(problem=problem, name__in=kernels):
            if candidate.name in rejected:
                continue  # wrong values while timed: its time is no result
            entry = dict(candidate.timings.get(protocol) or {})
            for stale in ("final_s", "final_statistic", "final_gpu_environment"):
                entry.pop(stale, None)  # written by earlier imports, before "final"
            # the final's own session: its kernel time beside the baselines it timed
            entry["final"] = {
                "seconds": kernels[candidate.name],
                **(kept.get(candidate.name) or {}),
                "statistic": statistic,
                "baselines": baselines,
                "gpu_environment": environment.id,
            }
            candidate.timings = {**candidate.timings, protocol: entry}
            candidate.save(update_fields=["timings"])
    return count


def candidates_apply_final_verdicts(*, problem: Problem, section: Mapping[str, Any]) -> None:
    """What the final said of each top kernel it names, kept on the candidate's
    ``verification_result``: its compute-sanitizer verdict (``sanitize``), its rejection while
    timed (``final_rejection``) and the final's error (``final_error``: e.g. "no kernel
    passed"). A kernel that failed the sanitizer or was rejected is REJECTED, so it never
    becomes the shape's best; the bundle reads the verdicts (webapp.campaigns.artifacts)."""
    from engine.publish.bundle import final_rejections

    sanitize = section.get("sanitize")
    sanitize = (
        {n: v for n, v in sanitize.items() if isinstance(v, Mapping)}
        if isinstance(sanitize, Mapping)
        else {}
    )
    rejected = final_rejections(section)
    error = section.get("error")
    for candidate in Candidate.objects.filter(problem=problem, name__in=[*sanitize, *rejected]):
        verification = dict(candidate.verification_result or {})
        verdict = sanitize.get(candidate.name)
        why = ""
        if verdict is not None:
            verification["sanitize"] = dict(verdict)
            if not verdict.get("ok"):
                message = verdict.get("message")
                why = f"compute-sanitizer: {verdict.get('reason', 'failed')}"
                why += f": {message}" if message else ""
        if candidate.name in rejected:
            verification["final_rejection"] = rejected[candidate.name]
            why = why or f"rejected in the finals: {rejected[candidate.name]}"
        if isinstance(error, str) and error:
            verification["final_error"] = error
        candidate.verification_result = verification
        fields = ["verification_result"]
        if why:
            candidate.status, candidate.failure_reason = Candidate.Status.REJECTED, why
            fields += ["status", "failure_reason"]
        candidate.save(update_fields=fields)


def torch_baseline_labels(section: Mapping[str, Any]) -> dict[str, str]:
    """``inductor_max_autotune_<layout>`` and ``tunableop_<layout>`` → what it ran (Inductor's
    pick, TunableOp's kernels), from a final's ``torch_baselines`` (engine.execution.final)."""
    labels: dict[str, str] = {}
    for runner, report in (section.get("torch_baselines") or {}).items():
        if isinstance(report, Mapping) and (label := tuned_label(dict(report))):
            labels[str(runner)] = label
    return labels


def cublaslt_kernel_labels(section: Mapping[str, Any]) -> dict[str, str]:
    """``cublaslt_autotune_<layout>`` and ``cublaslt_heuristic_<layout>`` → the label of the
    kernel it ran, from a final's ``cublaslt_kernels`` (engine.execution.final)."""
    labels: dict[str, str] = {}
    for runner, pair in (section.get("cublaslt_kernels") or {}).items():
        if not isinstance(pair, Mapping) or not runner.startswith("cublaslt_autotune_"):
            continue
        layout = runner.removeprefix("cublaslt_autotune_")
        for which, baseline in (
            ("autotune", "cublaslt_autotune"),
            ("heuristic", "cublaslt_heuristic"),
        ):
            kernel = pair.get(which)
            if isinstance(kernel, Mapping) and kernel.get("label"):
                labels[f"{baseline}_{layout}"] = str(kernel["label"])
    return labels
