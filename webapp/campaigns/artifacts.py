"""What the candidate page and the downloads make from stored records: the compile report (ptxas
resources per kernel), a shape's best kernel source, and the campaign's kernel bundle.

engine.publish.bundle imports torch, so it is imported only when a bundle is built.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import IO, Any

from django.utils.text import slugify

from engine.codegen import get_family
from engine.compilation.compile import KernelResources, parse_ptxas
from engine.publish.bundle import BundleKernel, is_faster, write_bundle
from webapp.campaigns.models import Campaign, Candidate, Problem

RESOURCE_COLUMNS = ("registers", "shared_bytes", "stack_bytes", "spill_stores_bytes")


# -- compile report ----------------------------------------------------------------------------
def compile_report(compile_result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The compile record as the candidate page shows it; None when nothing was recorded.

    ``kernels``: one row per entry function and arch, from the record's ``resources`` or, when it
    has none, parsed from its log with engine.compilation.compile.parse_ptxas; ``source`` says
    which.
    """
    if not compile_result:
        return None
    log = compile_result.get("log") or ""
    resources: list[KernelResources] = []
    source = ""
    for item in compile_result.get("resources") or ():
        try:
            resources.append(KernelResources.from_dict(item))
        except (TypeError, KeyError, AttributeError):
            continue
    if resources:
        source = "record"
    elif log:
        resources = list(parse_ptxas(log))
        source = "log" if resources else ""
    kernels = [
        {
            "name": r.name,
            "arch": r.arch,
            "registers": r.registers,
            "shared_bytes": r.shared_bytes,
            "stack_bytes": r.stack_bytes,
            "spill_stores_bytes": r.spill_stores_bytes,
            "spill_loads_bytes": r.spill_loads_bytes,
            "spills": r.spills,
        }
        for r in resources
    ]
    facts = [
        (label, compile_result.get(key))
        for key, label in (
            ("ok", "built"),
            ("seconds", "seconds"),
            ("registers", "registers (recorded)"),
            ("archs", "archs"),
            ("cached", "cached"),
            ("error", "error"),
        )
        if compile_result.get(key) not in (None, "", [])
    ]
    return {
        "facts": facts,
        "command": compile_result.get("command") or "",
        "log": log,
        "kernels": kernels,
        "resources_from": source,
    }


# -- a shape's best kernel ---------------------------------------------------------------------
def best_verified(*, problem: Problem) -> Candidate | None:
    """The shape's chosen kernel (webapp.campaigns.ratios): verified and timed beside the
    baselines in one session; None before one is."""
    candidate_id = (problem.best or {}).get("candidate")
    if candidate_id is None:
        return None
    return Candidate.objects.filter(
        id=candidate_id, problem=problem, status=Candidate.Status.DONE
    ).first()


def family_config(candidate: Candidate, problem: Problem) -> Any:
    """The engine config behind the candidate (its family's from_knobs, layout of the shape)."""

    return get_family(candidate.family).from_knobs(
        {**(candidate.config or {}), "layout": problem.layout}
    )


def kernel_source(candidate: Candidate) -> str:
    """The stored source, or (imported records have none) the one its family renders."""
    if candidate.source:
        return candidate.source
    return family_config(candidate, candidate.problem).render()


def kernel_file_name(*, candidate: Candidate) -> str:
    """e.g. gemmforge-shape-13-4096x4096x4096-nn-hgemm_sm90_....cu (ASCII only)."""
    problem = candidate.problem
    kernel = slugify(candidate.name).replace("-", "_")[:120] or f"candidate_{candidate.id}"
    return f"gemmforge-shape-{problem.id}-{problem.shape}-{problem.layout}-{kernel}.cu"


# -- the campaign's kernel bundle --------------------------------------------------------------
def bundle_file_name(*, campaign: Campaign, include_slower: bool) -> str:
    slug = slugify(campaign.name)[:60].strip("-") or "campaign"
    suffix = "-all" if include_slower else ""
    return f"gemmforge-campaign-{campaign.id}-{slug}-bundle{suffix}.zip"


def bundle_kernels(
    *, campaign: Campaign, include_slower: bool = False, over: str = "torch"
) -> list[Any]:
    """A BundleKernel per problem from its chosen kernel; by default only those faster than
    ``over`` (torch.matmul) in the session their numbers come from, a tie not being faster: the
    bundle's ops fall back to torch.matmul for the rest."""
    from webapp.campaigns.ratios import choice_of

    kernels = []
    for problem in campaign.problems.order_by("id"):
        choice = choice_of(problem.best or {})
        best = best_verified(problem=problem)
        if choice is None or best is None:
            continue
        found = choice.ratios()
        if not include_slower and not is_faster(found.get(over)):
            continue
        best.problem = problem
        config = family_config(best, problem)
        kernels.append(
            BundleKernel(
                problem=problem.as_engine(),
                name=config.name,
                source=best.source or config.render(),
                archs=tuple(config.archs),
                speedups={b: r.value for b, r in found.items()},
                seconds=choice.session.kernel.seconds,
                session=choice.session.name,
            )
        )
    return kernels


def bundle_environment(*, campaign: Campaign) -> dict[str, Any]:
    from webapp.campaigns.selectors import campaign_environments

    env = campaign_environments(campaign=campaign).first()
    if env is None:
        return {}
    return {
        "gpu_name": env.name,
        "arch": env.arch,
        "driver": env.driver_version,
        "cuda": env.cuda_version,
        "cublas": env.cublas_version,
        "cutlass": env.cutlass_version,
    }


def campaign_bundle(*, campaign: Campaign, include_slower: bool = False) -> IO[bytes]:
    """The bundle zip in a temporary file (rewound; closed by whoever streams it)."""
    from webapp.campaigns.ratios import campaign_headline

    kernels = bundle_kernels(campaign=campaign, include_slower=include_slower)
    with tempfile.TemporaryDirectory(prefix="gemmforge-bundle-") as folder:
        path = write_bundle(
            kernels,
            Path(folder) / "bundle.zip",
            environment=bundle_environment(campaign=campaign),
            title=campaign.name,
            headline=campaign_headline(campaign=campaign),
        )
        out = tempfile.TemporaryFile()  # noqa: SIM115 (the response streams and closes it)
        with path.open("rb") as zipped:
            while chunk := zipped.read(1 << 20):
                out.write(chunk)
    out.seek(0)
    return out
