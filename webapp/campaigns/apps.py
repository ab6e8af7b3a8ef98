from django.apps import AppConfig


class CampaignsConfig(AppConfig):
    name = "webapp.campaigns"
    verbose_name = "Campaigns"
