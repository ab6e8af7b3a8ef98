from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from webapp.campaigns import selectors, services
from webapp.campaigns.forms import CampaignForm
from webapp.campaigns.models import Campaign
from webapp.workers.selectors import workers_online

CAMPAIGNS_PER_PAGE = 20


def dashboard(request):
    page = Paginator(selectors.campaign_list(), CAMPAIGNS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    online = list(workers_online())
    return render(
        request,
        "campaigns/dashboard.html",
        {"page": page, "online": online, "gpu_online": any(w.serves_gpu for w in online)},
    )


@login_required
@require_http_methods(["GET", "POST"])
def campaign_new(request):
    form = CampaignForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        campaign = services.campaign_create(
            owner=request.user,
            name=form.cleaned_data["name"],
            layout=form.cleaned_data["layout"],
            problems=form.cleaned_data["problems"],
        )
        return redirect("campaign-detail", campaign_id=campaign.id)
    return render(request, "campaigns/new.html", {"form": form})


def campaign_detail(request, campaign_id: int):
    campaign = get_object_or_404(Campaign.objects.select_related("owner"), id=campaign_id)
    return render(
        request,
        "campaigns/detail.html",
        {"campaign": campaign, "problems": campaign.problems.all()},
    )
