"""A password someone else chose (printed by ensure_admin): it must be changed at first login."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class OneTimePassword(models.Model):
    """The user's password while it is still the printed one: ``password`` is its hash, so a
    password changed any way (the form, ``manage.py changepassword``) ends the requirement."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="one_time_password"
    )
    password = models.CharField(max_length=128, help_text="The hash it was created with.")
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"one-time password of {self.user}"
