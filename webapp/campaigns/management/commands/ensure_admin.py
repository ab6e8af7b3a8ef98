"""Make sure someone can log in: without a superuser, create `admin` with a printed password."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.accounts.one_time import one_time_password_set


class Command(BaseCommand):
    help = "Create 'admin' with a random password if no superuser exists; print how to log in."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--base-url", default="http://127.0.0.1:8000")

    def handle(self, *args, username: str, base_url: str, **options):
        User = get_user_model()
        login_url = f"{base_url.rstrip('/')}/accounts/login/"
        superusers = list(
            User.objects.filter(is_superuser=True).order_by("id").values_list("username", flat=True)
        )
        if superusers:
            self.stdout.write(
                f"Log in at {login_url} as {', '.join(superusers)} (the password printed when it"
                f" was created, unless changed since).\n"
                f"Forgot it? Run: .venv/bin/python manage.py changepassword {superusers[0]}"
            )
            return
        if User.objects.filter(username=username).exists():
            raise CommandError(
                f"user {username!r} exists but is not a superuser; run "
                f"'manage.py createsuperuser' or pass --username"
            )
        password = secrets.token_urlsafe(12)
        admin = User.objects.create_superuser(username=username, email="", password=password)
        one_time_password_set(user=admin)
        self.stdout.write(
            f"Created superuser {username!r} with one-time password: {password}\n"
            f"Log in at {login_url}: the first login asks you to choose a new password "
            f"(or set one now: .venv/bin/python manage.py changepassword {username})."
        )
