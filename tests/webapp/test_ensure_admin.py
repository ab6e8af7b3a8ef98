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
    assert client.get("/admin/").status_code == 302  # to the password change first
    assert "http://127.0.0.1:8000/accounts/login/" in output


def log_in(client, password: str):
    return client.post("/accounts/login/", {"username": "admin", "password": password})


def test_the_first_login_with_the_one_time_password_asks_for_a_new_one(client):
    password = ensure_admin().split("one-time password: ")[1].split()[0]
    assert log_in(client, password).status_code == 302
    for page in ["/", "/campaigns/new/", "/admin/"]:
        response = client.get(page)
        assert (response.status_code, response["Location"]) == (302, "/accounts/password_change/")
    form = client.get("/accounts/password_change/")
    assert "choose a new one" in form.content.decode()
    new = "a-new-secret-91"
    changed = client.post(
        "/accounts/password_change/",
        {"old_password": password, "new_password1": new, "new_password2": new},
    )
    assert changed.status_code == 302
    assert client.get("/campaigns/new/").status_code == 200  # no longer asked
    client.logout()
    assert log_in(client, "a-new-secret-91").status_code == 302
    assert client.get("/campaigns/new/").status_code == 200  # the new password is not one-time


def test_a_password_reset_on_the_command_line_ends_the_one_time_password(client):
    password = ensure_admin().split("one-time password: ")[1].split()[0]
    admin = get_user_model().objects.get(username="admin")
    admin.set_password("set-by-changepassword-7")
    admin.save()
    assert password != "set-by-changepassword-7"
    assert log_in(client, "set-by-changepassword-7").status_code == 302
    assert client.get("/campaigns/new/").status_code == 200


def test_an_ordinary_login_is_never_asked_to_change_its_password(client):
    get_user_model().objects.create_user("carol", password="carol-secret-3")
    client.post("/accounts/login/", {"username": "carol", "password": "carol-secret-3"})
    assert client.get("/campaigns/new/").status_code == 200


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
