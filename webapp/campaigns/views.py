import csv
import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer

from engine.problem import ALIGN_ELEMENTS, MAX_DIM, MAX_OPERAND_BYTES
from engine.publish.bundle import BundleError
from webapp import ratelimit
from webapp.campaigns import (
    artifacts,
    diffs,
    exports,
    failures,
    launch,
    live,
    ratios,
    selectors,
    services,
    times,
)
from webapp.campaigns.forms import (
    MAX_SHAPES,
    CampaignForm,
    CandidateFilterForm,
    HeatmapForm,
    launch_queue,
)
from webapp.campaigns.models import Campaign, Candidate, Problem
from webapp.workers.selectors import heartbeats_read

CAMPAIGNS_PER_PAGE = 20
# CUDA-L2's offline and server protocols: host wall clock around each call, so their ratios
# include the call path (launch, synchronisation), not only the kernels (README, "Results")
HOST_TIMED = ("offline", "server")
CANDIDATES_PER_PAGE = 50


def dashboard(request):
    page = Paginator(selectors.campaign_list(), CAMPAIGNS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    headlines = ratios.campaign_headlines(campaign_ids=[c.id for c in page.object_list])
    heartbeats = heartbeats_read()
    online = list(heartbeats.online)
    gpu_waits = live.campaign_gpu_waits(campaigns=page.object_list, heartbeats=heartbeats)
    for campaign in page.object_list:
        campaign.headline = ratios.headline_context(headlines[campaign.id])
        campaign.gpu_wait = gpu_waits.get(campaign.id)
    return render(
        request,
        "campaigns/dashboard.html",
        {
            "page": page,
            "online": online,
            "gpu_online": any(w.serves_gpu for w in online),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def campaign_new(request):
    served = heartbeats_read().served
    form = CampaignForm(request.POST or None, owner_id=request.user.pk, served_queues=served)
    status, retry_after = 200, 0
    if request.method == "POST" and form.is_valid():
        # only an accepted launch counts against the rate limit (a form with errors does not)
        retry_after = ratelimit.take(launch.launch_window(user_id=request.user.pk))
        if retry_after:
            status = 429
            form.add_error(None, launch.rate_limited_text(retry_after))
        else:
            return campaign_launch(request, form.cleaned_data)
    response = render(
        request,
        "campaigns/new.html",
        {
            "form": form,
            "presets": launch.presets_for_js(),
            "seconds_per_candidate": launch.GPU_SECONDS_PER_CANDIDATE,
            "max_shapes": MAX_SHAPES,
            "limits": {
                "max_dim": MAX_DIM,
                "align": ALIGN_ELEMENTS,
                "max_operand_bytes": MAX_OPERAND_BYTES,
            },
            # pool → its queue, for the pools no online worker serves (launch.js warns)
            "offline_pools": {
                str(pool): launch_queue(str(pool))
                for pool, _ in form.fields["gpu_pool"].choices
                if launch_queue(str(pool)) not in served
            },
        },
        status=status,
    )
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response


def campaign_launch(request, data: dict):
    campaign = services.campaign_create(
        owner=request.user,
        name=data["name"],
        layout=data["layout"],
        problems=data["problems"],
        budget_per_shape=data["budget_per_shape"],
        proposer_mix=data["proposer_mix"],
        reward_protocol=data["reward_protocol"],
        gpu_pool=data.get("gpu_pool", ""),
        search_space=data["search_space"],  # the form defaults it
    )
    merged = f", {data['duplicates']} duplicates merged" if data["duplicates"] else ""
    messages.success(
        request,
        f"Launched {len(data['problems'])} shapes{merged}; estimated GPU time "
        f"{launch.duration_text(data['estimated_gpu_s'])}.",
    )
    return redirect("campaign-detail", campaign_id=campaign.id)


@require_GET
def campaign_detail(request, campaign_id: int):
    campaign = get_object_or_404(Campaign.objects.select_related("owner"), id=campaign_id)
    shapes = selectors.campaign_shapes(campaign=campaign)
    heartbeats = heartbeats_read()
    gpu_wait = live.campaign_gpu_wait(campaign=campaign, heartbeats=heartbeats)
    rows = [selectors.shape_row(p) for p in shapes]
    shown = selectors.shown_baselines(rows)
    lines = selectors.shape_lines(
        shapes,
        rows,
        shown=shown,
        waits=live.campaign_waits(campaign=campaign, heartbeats=heartbeats),
        etas=live.campaign_eta_seconds(campaign=campaign),
    )
    timed = any(p["best"] for p in shapes)
    return render(
        request,
        "campaigns/detail.html",
        {
            "campaign": campaign,
            "status_label": live.WAITING_LABEL if gpu_wait else campaign.get_status_display(),
            "gpu_wait": gpu_wait,
            "problems": lines,
            "baselines": selectors.baseline_legend(shown),
            "headline": ratios.headline_context(
                ratios.headline_of((p["m"], p["n"], p["k"], p["layout"], p["best"]) for p in shapes)
            ),
            # a campaign that never ran measured on no GPU: none is shown
            "environments": list(selectors.campaign_environments(campaign=campaign))
            if timed
            else [],
            "heatmap_form": HeatmapForm(
                ks=sorted({p["k"] for p in shapes}),
                layouts=sorted({p["layout"] for p in shapes}),
                baselines=shown,
                initial={"k": selectors.most_common_k([p["k"] for p in shapes])},
            ),
            "can_control": request.user.is_authenticated and request.user.id == campaign.owner_id,
            "no_bundle": "" if timed else artifacts.NO_BUNDLE,
            "live": campaign.status in live.ACTIVE,
            "proposers": selectors.campaign_proposers(campaign=campaign),
            "times": times.times_display(
                times.campaign_times(campaign=campaign, now=timezone.now())
            ),
            "progress": {
                "shapes": len(shapes),
                "shapes_done": sum(p["status"] == Problem.Status.DONE for p in shapes),
                "candidates": sum(p["candidate_count"] for p in shapes),
            },
        },
    )


@login_required
@require_POST
def campaign_control(request, campaign_id: int, action: str):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    if campaign.owner_id != request.user.id:
        raise PermissionDenied("only the campaign's owner can control it")
    try:
        status = services.campaign_control(campaign_id=campaign.id, action=action)
    except services.CampaignControlError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Campaign is now {status}.")
    return redirect("campaign-detail", campaign_id=campaign.id)


@require_GET
def problem_detail(request, problem_id: int):
    problem = get_object_or_404(Problem.objects.select_related("campaign"), id=problem_id)
    facets = selectors.candidate_facets(problem=problem)
    form = CandidateFilterForm(request.GET or None, **facets)
    filters = form.cleaned_data if form.is_valid() else {}
    table = selectors.candidate_table(
        problem=problem,
        sort=filters.get("sort") or "speedup",
        status=filters.get("status", ""),
        proposer=filters.get("proposer", ""),
        family=filters.get("family", ""),
    )
    page = Paginator(table, CANDIDATES_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    protocol = problem.campaign.reward_protocol
    choice = ratios.choice_of(problem.best or {})
    kernels = selectors.baseline_best_kernels(problem=problem, protocol=protocol)
    gpus = ratios.gpu_names()  # the candidate page and the exports judge ties by these too
    for candidate in page.object_list:
        session, found = ratios.shown_ratios(candidate.timings or {}, protocol, gpus)
        r = found.get(ratios.REWARD_BASELINE) if candidate.status == Candidate.Status.DONE else None
        candidate.session_name = session.name if session else ""
        candidate.harness = failures.is_harness_failure(
            status=candidate.status, reason="", message=candidate.failure_reason
        )
        candidate.speedup = r
        candidate.tflops = (
            problem.as_engine().flops / candidate.median_s / 1e12 if candidate.median_s else None
        )
    return render(
        request,
        "campaigns/problem.html",
        {
            "problem": problem,
            "campaign": problem.campaign,
            "form": form,
            "page": page,
            "query": query.urlencode(),
            "best": problem.best or None,
            "session": choice.session if choice else None,
            "baselines": session_rows(choice, kernels),
            "baseline_kernels": bool(kernels),
            "protocol": protocol,
            "reward_label": selectors.BASELINE_LABELS[ratios.REWARD_BASELINE],
        },
    )


def session_rows(choice: ratios.Choice | None, kernels: dict[str, str]) -> list[dict]:
    """The chosen kernel's session: each baseline's time in it, and the ratio."""
    if choice is None:
        return []
    found = choice.ratios()
    return [
        {
            "label": selectors.BASELINE_LABELS[b],
            "seconds": choice.session.baselines[b].seconds,
            "ratio": found[b],
            "kernel": kernels.get(b),
        }
        for b in selectors.BASELINES
        if b in choice.session.baselines
    ]


@require_GET
def candidate_detail(request, candidate_id: int):
    candidate = get_object_or_404(
        Candidate.objects.select_related("problem__campaign", "parent"), id=candidate_id
    )
    problem = candidate.problem
    flops = problem.as_engine().flops
    gpus = ratios.gpu_names()
    by_protocol = {
        protocol: ratios.candidate_sessions(candidate.timings, protocol, gpus)
        for protocol in sorted(candidate.timings or {})
    }
    # a column per baseline some session timed beside this kernel, the reward baseline first
    timed = {b for sessions in by_protocol.values() for s in sessions for b in s.baselines}
    columns = [b for b in selectors.BASELINE_ORDER if b in timed]
    timings = []
    for protocol, protocol_sessions in by_protocol.items():
        record = candidate.timings[protocol] or {}
        shown = ratios.preferred(protocol_sessions)
        sessions = []
        for session in protocol_sessions:
            found = session.ratios() if candidate.status == Candidate.Status.DONE else {}
            sessions.append(
                {
                    "name": session.name,
                    "shown": session == shown,
                    "seconds": session.kernel.seconds,
                    "tflops": flops / session.kernel.seconds / 1e12,
                    "speedups": [found.get(b) for b in columns],
                }
            )
        timings.append(
            {
                "protocol": protocol,
                "host_timed": protocol in HOST_TIMED,
                "sessions": sessions,
                "details": {
                    k: v
                    for k, v in record.items()
                    if k not in ("median_s", "baselines", "final", "p25", "p75")
                },
            }
        )
    formatter = HtmlFormatter(linenos="table", cssclass="source")
    best = artifacts.best_verified(problem=problem)
    verification = candidate.verification_result or {}
    message = candidate.failure_reason or ""
    return render(
        request,
        "campaigns/candidate.html",
        {
            "candidate": candidate,
            "problem": problem,
            "campaign": problem.campaign,
            "source_html": highlight(candidate.source, CppLexer(), formatter)
            if candidate.source
            else "",
            "source_css": formatter.get_style_defs(".source") if candidate.source else "",
            "config_json": json.dumps(candidate.config, indent=2, sort_keys=True),
            "compile_report": artifacts.compile_report(candidate.compile_result),
            "verification": verification,
            "baseline_columns": [selectors.BASELINE_LABELS[b] for b in columns],
            # one failure message, folded after its first line; the verdict does not repeat it
            "failure": failures.folded(message) if message else None,
            "verdict_message": ""
            if verification.get("message") == message
            else verification.get("message", ""),
            "harness_failure": failures.is_harness_failure(
                status=candidate.status,
                reason=str(verification.get("reason") or ""),
                message=message,
            ),
            "timings": timings,
            "diffs": diffs.candidate_diffs(candidate=candidate, best=best),
            "is_best": best is not None and best.id == candidate.id,
            "conversation": llm_conversation(candidate),
            "carried_from": carried_from(candidate),
        },
    )


# JSON endpoints behind the charts (documented in docs/dashboard.md, "JSON API")


@require_GET
def api_campaign_speedups(request, campaign_id: int):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    return JsonResponse(selectors.campaign_speedups_data(campaign=campaign))


@require_GET
def api_campaign_progress(request, campaign_id: int):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    return JsonResponse(
        selectors.campaign_progress_data(campaign=campaign, heartbeats=heartbeats_read())
    )


@require_GET
def api_campaign_heatmap(request, campaign_id: int):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    form = HeatmapForm(request.GET)
    if not form.is_valid():
        return JsonResponse({"errors": form.errors}, status=400)
    k = form.cleaned_data.get("k")
    ks = sorted(set(campaign.problems.values_list("k", flat=True)))
    if k is not None and k not in ks:
        shown = ", ".join(map(str, ks)) or "none"
        return JsonResponse({"errors": {"k": [f"no shape has K={k}; its Ks: {shown}"]}}, status=400)
    return JsonResponse(
        selectors.campaign_heatmap_data(
            campaign=campaign,
            k=form.cleaned_data.get("k"),
            baseline=form.cleaned_data.get("baseline") or "cublaslt_autotune",
            layout=form.cleaned_data.get("layout") or None,
        )
    )


@require_GET
def api_problem_history(request, problem_id: int):
    problem = get_object_or_404(Problem.objects.select_related("campaign"), id=problem_id)
    return JsonResponse(selectors.problem_history_data(problem=problem))


@require_GET
def api_campaign_history(request, campaign_id: int):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    return JsonResponse(selectors.campaign_history_data(campaign=campaign))


@require_GET
def api_campaign_knobs(request, campaign_id: int):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    return JsonResponse(selectors.knob_data(campaign=campaign))


@require_GET
def api_problem_knobs(request, problem_id: int):
    problem = get_object_or_404(Problem.objects.select_related("campaign"), id=problem_id)
    return JsonResponse(selectors.knob_data(campaign=problem.campaign, problem=problem))


# Downloads


class Echo:
    """A file-like object whose write() returns the line, for streaming csv.writer output."""

    def write(self, value: str) -> str:
        return value


@require_GET
def campaign_results_csv(request, campaign_id: int):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    writer = csv.DictWriter(Echo(), fieldnames=exports.CSV_HEADER)

    def lines():
        yield writer.writeheader()
        for row in exports.result_rows(campaign=campaign):
            yield writer.writerow(row)

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    name = exports.download_name(campaign=campaign, extension="csv")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_GET
def campaign_results_json(request, campaign_id: int):
    campaign = get_object_or_404(Campaign.objects.select_related("owner"), id=campaign_id)
    response = HttpResponse(
        json.dumps(exports.campaign_document(campaign=campaign), indent=1),
        content_type="application/json",
    )
    name = exports.download_name(campaign=campaign, extension="json")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_GET
def problem_best_kernel(request, problem_id: int):
    """The shape's best verified kernel as a .cu file (rendered from its config if unstored)."""
    problem = get_object_or_404(Problem.objects.select_related("campaign"), id=problem_id)
    best = artifacts.best_verified(problem=problem)
    if best is None:
        raise Http404("no verified kernel for this shape yet")
    best.problem = problem
    return HttpResponse(
        artifacts.kernel_source(best),
        content_type="text/x-cuda; charset=utf-8",
        headers={
            "Content-Disposition": (
                f'attachment; filename="{artifacts.kernel_file_name(candidate=best)}"'
            )
        },
    )


@require_GET
def campaign_bundle(request, campaign_id: int):
    """The kernel bundle zip; ?slower=1 keeps kernels slower than torch.matmul too."""
    campaign = get_object_or_404(Campaign, id=campaign_id)
    include_slower = request.GET.get("slower") == "1"
    if why := artifacts.bundle_unavailable(campaign=campaign):
        raise Http404(f"no kernel bundle: {why}")
    try:
        zipped = artifacts.campaign_bundle(campaign=campaign, include_slower=include_slower)
    except BundleError as exc:
        return HttpResponse(
            f"the bundle cannot be made: {exc}\n", status=409, content_type="text/plain"
        )
    return FileResponse(
        zipped,
        as_attachment=True,
        filename=artifacts.bundle_file_name(campaign=campaign, include_slower=include_slower),
        content_type="application/zip",
    )


def carried_from(candidate: Candidate) -> str:
    """The problem a transfer proposal was carried over from ("" if not recorded, or not a
    transfer proposal): from the proposal, or from the record of an imported campaign."""
    meta = candidate.proposal or (candidate.outcome or {}).get("meta") or {}
    value = meta.get("carried_from") if candidate.proposer == "transfer" else None
    return value if isinstance(value, str) else ""


def llm_conversation(candidate: Candidate) -> dict | None:
    """The prompt messages and the raw answer of a model-written candidate (None otherwise)."""
    meta = (candidate.outcome or {}).get("meta") or {}
    if not meta.get("messages") and not meta.get("answer"):
        return None
    messages = [m for m in meta.get("messages", []) if isinstance(m, dict)]
    return {"messages": messages, "answer": meta.get("answer") or ""}
