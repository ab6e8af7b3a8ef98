import csv
import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer

from webapp import ratelimit
from webapp.campaigns import artifacts, diffs, exports, launch, selectors, services
from webapp.campaigns.forms import MAX_SHAPES, CampaignForm, CandidateFilterForm, HeatmapForm
from webapp.campaigns.models import Campaign, Candidate, Problem
from webapp.workers.selectors import workers_online

CAMPAIGNS_PER_PAGE = 20
CANDIDATES_PER_PAGE = 50


def dashboard(request):
    page = Paginator(selectors.campaign_list(), CAMPAIGNS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    for campaign in page.object_list:
        campaign.bests = [
            getattr(campaign, selectors.best_speedup_field(b)) for b in selectors.BASELINES
        ]
    online = list(workers_online())
    return render(
        request,
        "campaigns/dashboard.html",
        {
            "page": page,
            "baselines": selectors.BASELINE_LABELS,
            "online": online,
            "gpu_online": any(w.serves_gpu for w in online),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def campaign_new(request):
    form = CampaignForm(request.POST or None, owner_id=request.user.pk)
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
        search_space=data.get("search_space") or Campaign.SearchSpace.FULL,
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
    problems = list(selectors.campaign_problems(campaign=campaign))
    for problem in problems:
        problem.bests = [problem.best_speedups.get(b) for b in selectors.BASELINES]
    return render(
        request,
        "campaigns/detail.html",
        {
            "campaign": campaign,
            "problems": problems,
            "baselines": selectors.BASELINE_LABELS,
            "environments": list(selectors.campaign_environments(campaign=campaign)),
            "heatmap_form": HeatmapForm(
                ks=sorted({p.k for p in problems}), layouts=sorted({p.layout for p in problems})
            ),
            "can_control": request.user.is_authenticated and request.user.id == campaign.owner_id,
            "progress": {
                "shapes": len(problems),
                "shapes_done": sum(p.status == Problem.Status.DONE for p in problems),
                "candidates": sum(p.candidate_count for p in problems),
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
        sort=filters.get("sort") or "reward",
        status=filters.get("status", ""),
        proposer=filters.get("proposer", ""),
        family=filters.get("family", ""),
    )
    page = Paginator(table, CANDIDATES_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    protocol = problem.campaign.reward_protocol
    baselines = selectors.baseline_best_seconds(problem=problem, protocol=protocol)
    kernels = selectors.baseline_best_kernels(problem=problem, protocol=protocol)
    best = selectors.candidates_best_first(problem=problem).only("id", "name", "reward").first()
    return render(
        request,
        "campaigns/problem.html",
        {
            "problem": problem,
            "campaign": problem.campaign,
            "form": form,
            "page": page,
            "query": query.urlencode(),
            "best": best,
            "baselines": [
                (selectors.BASELINE_LABELS[b], baselines.get(b), kernels.get(b))
                for b in selectors.BASELINES
            ],
            "baseline_kernels": bool(kernels),
            "protocol": protocol,
        },
    )


@require_GET
def candidate_detail(request, candidate_id: int):
    candidate = get_object_or_404(
        Candidate.objects.select_related("problem__campaign", "parent"), id=candidate_id
    )
    problem = candidate.problem
    baselines: dict[str, dict[str, float]] = {}
    timings = []
    for protocol, record in sorted(candidate.timings.items()):
        baselines[protocol] = selectors.baseline_best_seconds(problem=problem, protocol=protocol)
        median = record.get("median_s")
        ratios = selectors.speedups(seconds=median, baselines=baselines[protocol])
        timings.append(
            {
                "protocol": protocol,
                "median_s": median,
                "details": {k: v for k, v in record.items() if k != "median_s"},
                "speedups": [
                    (selectors.BASELINE_LABELS[b], ratios.get(b)) for b in selectors.BASELINES
                ],
            }
        )
    formatter = HtmlFormatter(linenos="table", cssclass="source")
    best = selectors.candidates_best_first(problem=problem).first()
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
            "verification": candidate.verification_result or {},
            "timings": timings,
            "diffs": diffs.candidate_diffs(candidate=candidate, best=best),
            "is_best": best is not None and best.id == candidate.id,
            "conversation": llm_conversation(candidate),
            "carried_from": carried_from(candidate),
        },
    )


# JSON endpoints behind the charts (documented in README, "Dashboard JSON API")


@require_GET
def api_campaign_speedups(request, campaign_id: int):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    return JsonResponse(selectors.campaign_speedups_data(campaign=campaign))


@require_GET
def api_campaign_progress(request, campaign_id: int):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    return JsonResponse(selectors.campaign_progress_data(campaign=campaign))


@require_GET
def api_campaign_heatmap(request, campaign_id: int):
    campaign = get_object_or_404(Campaign, id=campaign_id)
    form = HeatmapForm(request.GET)
    if not form.is_valid():
        return JsonResponse({"errors": form.errors}, status=400)
    return JsonResponse(
        selectors.campaign_heatmap_data(
            campaign=campaign,
            k=form.cleaned_data.get("k"),
            baseline=form.cleaned_data.get("baseline") or "cublaslt_autotune",
            layout=form.cleaned_data.get("layout") or None,
        )
    )


@require_GET
def api_problem_rewards(request, problem_id: int):
    problem = get_object_or_404(Problem, id=problem_id)
    return JsonResponse(selectors.problem_rewards_data(problem=problem))


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
    return FileResponse(
        artifacts.campaign_bundle(campaign=campaign, include_slower=include_slower),
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
