from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "webapp.workers"
    verbose_name = "Workers"

    def ready(self) -> None:
        from webapp.workers import heartbeats

        heartbeats.connect()
