from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "webapp.accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from webapp.accounts.one_time import on_login

        user_logged_in.connect(on_login, dispatch_uid="one-time-password")
