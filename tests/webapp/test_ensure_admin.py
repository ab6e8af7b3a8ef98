from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def ensure_admin(*args) -> str:
    out = StringIO()
    call_command("ensure_admin", *args, stdout=out)
    return out.getvalue()


def test_it_creates_admin_with_a_printed_password_that_works(client):
    output = ensure_admin()
    password = output.split("one-time password: ")[1].split()[0]
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser
    assert admin.is_staff
    assert admin.check_password(password)
    assert client.login(username="admin", password=password)
    assert client.get("/admin/").status_code == 200
    assert "http://127.0.0.1:8000/accounts/login/" in output


def test_it_makes_a_new_password_each_time_it_creates_an_admin():
    first = ensure_admin().split("one-time password: ")[1].split()[0]
    get_user_model().objects.all().delete()
    second = ensure_admin().split("one-time password: ")[1].split()[0]
    assert first != second
    assert len(first) >= 16


def test_it_leaves_an_existing_superuser_alone_and_says_how_to_reset():
    get_user_model().objects.create_superuser("root", "", "secret-secret")
    output = ensure_admin("--base-url", "http://gpu-box:9000/")
    assert "one-time password" not in output
    assert "as root" in output
    assert "manage.py changepassword root" in output
    assert "http://gpu-box:9000/accounts/login/" in output
    assert get_user_model().objects.count() == 1
    assert get_user_model().objects.get().check_password("secret-secret")


def test_it_refuses_to_clobber_an_ordinary_user_named_admin():
    get_user_model().objects.create_user("admin", password="x")
    with pytest.raises(CommandError, match="not a superuser"):
        ensure_admin()
