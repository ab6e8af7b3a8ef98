from django.contrib import admin
from django.urls import include, path

from webapp.campaigns import views as campaign_views
from webapp.workers import views as worker_views

urlpatterns = [
    path("", campaign_views.dashboard, name="dashboard"),
    path("campaigns/new/", campaign_views.campaign_new, name="campaign-new"),
    path("campaigns/<int:campaign_id>/", campaign_views.campaign_detail, name="campaign-detail"),
    path("workers/", worker_views.workers, name="workers"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]
