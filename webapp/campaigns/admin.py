from django.contrib import admin

from webapp.campaigns.models import BaselineResult, Campaign, Candidate, Problem


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "status", "layout", "budget_per_shape", "created"]
    list_filter = ["status", "layout", "reward_protocol"]
    search_fields = ["name", "owner__username"]
    raw_id_fields = ["owner"]
    date_hierarchy = "created"


@admin.register(Problem)
class ProblemAdmin(admin.ModelAdmin):
    list_display = ["__str__", "campaign", "m", "n", "k", "layout", "status", "best_speedups"]
    list_filter = ["status", "layout"]
    search_fields = ["campaign__name"]
    raw_id_fields = ["campaign"]


@admin.register(Candidate)
class CandidateAdmin(admin.ModelAdmin):
    list_display = ["name", "problem", "family", "proposer", "status", "compile_status", "reward"]
    list_filter = ["status", "compile_status", "family", "proposer"]
    search_fields = ["name", "source_hash"]
    raw_id_fields = ["problem", "parent"]
    readonly_fields = ["source_hash", "created"]


@admin.register(BaselineResult)
class BaselineResultAdmin(admin.ModelAdmin):
    list_display = ["baseline", "m", "n", "k", "layout", "variant", "gpu_environment", "created"]
    list_filter = ["baseline", "layout", "variant", "gpu_environment__arch"]
    search_fields = ["baseline"]
    raw_id_fields = ["gpu_environment"]
