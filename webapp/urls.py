from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from django.views.decorators.http import require_GET

from webapp.campaigns import views as campaign_views
from webapp.security import (
    ThrottledAdminAuthenticationForm,
    ThrottledAuthenticationForm,
    answer_429_when_throttled,
)
from webapp.workers import views as worker_views

# Both logins count failures per user name and per IP (webapp.security).
admin.site.login_form = ThrottledAdminAuthenticationForm
admin_login = admin.site.login
admin.site.login = answer_429_when_throttled(admin_login)  # type: ignore[method-assign]

throttled_login = path(
    "login/",
    answer_429_when_throttled(
        auth_views.LoginView.as_view(authentication_form=ThrottledAuthenticationForm)
    ),
    name="login",
)

urlpatterns = [
    path("", require_GET(campaign_views.dashboard), name="dashboard"),  # read-only: GET/HEAD
    path("campaigns/new/", campaign_views.campaign_new, name="campaign-new"),
    path("campaigns/<int:campaign_id>/", campaign_views.campaign_detail, name="campaign-detail"),
    re_path(
        r"^campaigns/(?P<campaign_id>[0-9]+)/(?P<action>pause|resume|cancel)/$",
        campaign_views.campaign_control,
        name="campaign-control",
    ),
    path(
        "campaigns/<int:campaign_id>/results.csv",
        campaign_views.campaign_results_csv,
        name="campaign-results-csv",
    ),
    path(
        "campaigns/<int:campaign_id>/results.json",
        campaign_views.campaign_results_json,
        name="campaign-results-json",
    ),
    path(
        "campaigns/<int:campaign_id>/bundle.zip",
        campaign_views.campaign_bundle,
        name="campaign-bundle",
    ),
    path("shapes/<int:problem_id>/", campaign_views.problem_detail, name="problem-detail"),
    path(
        "shapes/<int:problem_id>/best.cu",
        campaign_views.problem_best_kernel,
        name="problem-best-kernel",
    ),
    path(
        "candidates/<int:candidate_id>/", campaign_views.candidate_detail, name="candidate-detail"
    ),
    path(
        "api/campaigns/<int:campaign_id>/speedups.json",
        campaign_views.api_campaign_speedups,
        name="api-campaign-speedups",
    ),
    path(
        "api/campaigns/<int:campaign_id>/progress.json",
        campaign_views.api_campaign_progress,
        name="api-campaign-progress",
    ),
    path(
        "api/campaigns/<int:campaign_id>/heatmap.json",
        campaign_views.api_campaign_heatmap,
        name="api-campaign-heatmap",
    ),
    path(
        "api/campaigns/<int:campaign_id>/history.json",
        campaign_views.api_campaign_history,
        name="api-campaign-history",
    ),
    path(
        "api/campaigns/<int:campaign_id>/knobs.json",
        campaign_views.api_campaign_knobs,
        name="api-campaign-knobs",
    ),
    path(
        "api/shapes/<int:problem_id>/history.json",
        campaign_views.api_problem_history,
        name="api-problem-history",
    ),
    path(
        "api/shapes/<int:problem_id>/knobs.json",
        campaign_views.api_problem_knobs,
        name="api-problem-knobs",
    ),
    path("workers/", worker_views.workers, name="workers"),
    path("accounts/", include([throttled_login, path("", include("django.contrib.auth.urls"))])),
    path("admin/", admin.site.urls),
]
