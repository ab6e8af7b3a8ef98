"""Web security: logins for state changes, CSRF, ownership, strict shapes, the
launch rate limit, downloads by id only, production settings (`check --deploy` clean)."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from webapp.campaigns.forms import CampaignForm
from webapp.campaigns.models import Campaign

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = {
    "name": "attention",
    "shapes": "4096x4096x4096",
    "layout": "tn",
    "budget_per_shape": "64",
    "proposer_mix": "rl=1",
    "reward_protocol": "device",
    "launch_without_worker": "on",  # no GPU worker runs in these tests
}


def our_routes():
    """(pattern text, callback) of every URL outside the admin and Django's auth views."""
    found = []

    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                if str(p.pattern) in {"admin/", "accounts/"}:
                    continue
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                found.append((prefix + str(p.pattern), p))

    walk(get_resolver().url_patterns)
    return found


def concrete_url(pattern: URLPattern, recorded_campaign) -> str:
    problem = recorded_campaign.problems.first()
    args = {
        "campaign_id": recorded_campaign.id,
        "problem_id": problem.id,
        "candidate_id": problem.candidates.first().id,
        "action": "cancel",
    }
    names = pattern.pattern.regex.groupindex
    return reverse(pattern.name, kwargs={n: args[n] for n in names})


# --- Login for every state change --------------------------------------------------------------


@pytest.mark.django_db
def test_every_route_refuses_an_anonymous_post_and_changes_nothing(client, recorded_campaign):
    """The audit: an anonymous POST to any of our URLs is sent to the login page or refused."""
    routes = our_routes()
    assert len(routes) >= 10
    before = Campaign.objects.values_list("id", "status").order_by("id")
    before = list(before)
    for text, pattern in routes:
        url = concrete_url(pattern, recorded_campaign)
        response = client.post(url, LAUNCH)
        if response.status_code == 302:
            assert response["Location"].startswith("/accounts/login/"), text
        else:
            assert response.status_code == 405, (text, response.status_code)
    assert list(Campaign.objects.values_list("id", "status").order_by("id")) == before


@pytest.mark.django_db
def test_only_launch_and_control_accept_a_post_from_a_logged_in_user(
    alice_client, bob, recorded_campaign
):
    """Every other view is read-only (GET); new state-changing views must join this list."""
    accepting = []
    for _text, pattern in our_routes():
        response = alice_client.post(concrete_url(pattern, recorded_campaign), {})
        if response.status_code != 405:
            accepting.append(pattern.name)
    assert sorted(accepting) == ["campaign-control", "campaign-new"]


# --- CSRF -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_csrf_is_enforced_on_launch_and_control(alice, queued_campaign):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    control = reverse("campaign-control", args=[queued_campaign.id, "pause"])
    assert client.post("/campaigns/new/", LAUNCH).status_code == 403
    assert client.post(control).status_code == 403
    assert Campaign.objects.count() == 1
    queued_campaign.refresh_from_db()
    assert queued_campaign.status == Campaign.Status.QUEUED
    # A forged token is no better than none.
    client.cookies["csrftoken"] = "x" * 32
    assert client.post(control, {"csrfmiddlewaretoken": "y" * 32}).status_code == 403

    # With the token the form page hands out, both work.
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.get("/campaigns/new/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    assert client.post(control, {"csrfmiddlewaretoken": token}).status_code == 302
    queued_campaign.refresh_from_db()
    assert queued_campaign.status == Campaign.Status.PAUSED
    response = client.post("/campaigns/new/", {**LAUNCH, "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Campaign.objects.count() == 2


# --- Ownership: owner, another user, anonymous -------------------------------------------------
# (control: tests/webapp/test_dashboard_pages.py, test_control_needs_a_login,
#  test_only_the_owner_can_control_a_campaign, test_the_owner_pauses_resumes_and_cancels)


@pytest.mark.django_db
def test_a_launched_campaign_belongs_to_whoever_launched_it_not_to_a_posted_owner(
    alice_client, alice, bob
):
    response = alice_client.post("/campaigns/new/", {**LAUNCH, "owner": bob.id, "owner_id": bob.id})
    assert response.status_code == 302
    assert Campaign.objects.get().owner == alice


# --- Strict (M, N, K) parsing, through the form -------------------------------------------------


def form(**fields) -> CampaignForm:
    return CampaignForm(data={**LAUNCH, "shapes": "", **fields})


@pytest.mark.parametrize(
    "shape",
    [
        "4_096x4096x4096",
        "4096x4_096x4096",
        "4096.0x4096x4096",
        "4096x4096x4096.0",
        "４０９６x４０９６x４０９６",  # full-width digits
        "٤٠٩٦x4096x4096",  # Arabic-Indic digits
        "+4096x4096x4096",
        "4e3x4096x4096",
        "0x10x4096x4096",
        "true",
        "True",
        "[4096, 4096, 4096]",
    ],
)
def test_a_shape_line_is_plain_ascii_digits_only(shape):
    f = form(shapes=shape)
    assert not f.is_valid()
    assert f.errors["shapes"][0].startswith("line 1: cannot read shape")


@pytest.mark.parametrize("value", ["4_096", "4096.0", "４０９６", "true", "True", "1e3", "+64"])
@pytest.mark.parametrize("axis", ["grid_m", "grid_n", "grid_k", "tokens"])
def test_grid_values_and_token_counts_are_plain_ascii_digits_only(axis, value):
    fields = {"grid_m": "64", "grid_n": "64", "grid_k": "64", "preset": "llama3-8b"}
    f = form(**{**fields, axis: value})
    assert not f.is_valid()
    assert "is not a whole number" in f.errors[axis][0]


@pytest.mark.parametrize("value", [True, False, [4096], {"m": 4096}])
def test_json_values_that_are_not_text_are_rejected(value):
    """A JSON client posting booleans or arrays gets errors, never 1 (True) or a shape."""
    f = form(shapes=value, grid_m=value, grid_n="64", grid_k="64")
    assert not f.is_valid()
    assert "shapes" in f.errors or "grid_m" in f.errors


def test_the_same_shape_written_plainly_is_accepted():
    f = form(shapes="4096x4096x4096", grid_m="64", grid_n="64", grid_k="64")
    assert f.is_valid(), f.errors
    assert {(p.m, p.n, p.k) for p in f.cleaned_data["problems"]} == {
        (4096, 4096, 4096),
        (64, 64, 64),
    }


# --- Rate limit on launching ------------------------------------------------------------------


@pytest.mark.django_db
def test_launching_is_rate_limited_per_user(client, alice, bob, settings):
    settings.LAUNCH_RATE_LIMIT = 3
    settings.LAUNCH_RATE_WINDOW_SECONDS = 60
    client.force_login(alice)
    for _ in range(3):
        assert client.post("/campaigns/new/", LAUNCH).status_code == 302
    assert client.get("/campaigns/new/").status_code == 200  # looking at the form is free
    refused = client.post("/campaigns/new/", LAUNCH)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 61
    assert "at most 3 per 60 s" in refused.content.decode()
    assert Campaign.objects.filter(owner=alice).count() == 3
    # Another user has a budget of their own; an anonymous user is sent to log in, not counted.
    client.force_login(bob)
    assert client.post("/campaigns/new/", LAUNCH).status_code == 302
    client.logout()
    response = client.post("/campaigns/new/", LAUNCH)
    assert (response.status_code, response["Location"][:16]) == (302, "/accounts/login/")


@pytest.mark.django_db
def test_the_launch_limit_resets_with_the_next_window(client, alice, settings, monkeypatch):
    import webapp.ratelimit

    settings.LAUNCH_RATE_LIMIT = 1
    settings.LAUNCH_RATE_WINDOW_SECONDS = 60
    now = [1_800_000_000.0]
    monkeypatch.setattr(webapp.ratelimit.time, "time", lambda: now[0])
    client.force_login(alice)
    assert client.post("/campaigns/new/", LAUNCH).status_code == 302
    assert client.post("/campaigns/new/", LAUNCH).status_code == 429
    now[0] += 60
    assert client.post("/campaigns/new/", LAUNCH).status_code == 302


@pytest.mark.django_db
def test_only_accepted_launches_count_against_the_limit(client, alice, settings):
    settings.LAUNCH_RATE_LIMIT = 2
    client.force_login(alice)
    for _ in range(5):  # each has an error: nothing launched, nothing counted
        assert client.post("/campaigns/new/", {**LAUNCH, "shapes": "8x9x8"}).status_code == 200
    assert client.post("/campaigns/new/", LAUNCH).status_code == 302
    assert client.post("/campaigns/new/", LAUNCH).status_code == 302
    assert client.post("/campaigns/new/", LAUNCH).status_code == 429
    assert Campaign.objects.count() == 2


@pytest.mark.django_db
def test_a_refused_launch_renders_the_form_again_with_the_message(client, alice, settings):
    settings.LAUNCH_RATE_LIMIT = 1
    client.force_login(alice)
    assert client.post("/campaigns/new/", LAUNCH).status_code == 302
    refused = client.post("/campaigns/new/", {**LAUNCH, "name": "second try"})
    assert refused.status_code == 429
    assert refused["Content-Type"].startswith("text/html")
    page = refused.content.decode()
    assert 'id="launch-form"' in page
    assert 'value="second try"' in page  # what was typed is kept
    assert "Nothing was launched; your form is kept" in page


# --- Downloads by id only -----------------------------------------------------------------------


def test_every_url_parameter_is_a_number_or_a_fixed_word():
    """No path or free-text parameters anywhere: files are found by database id only."""
    for text, pattern in our_routes():
        for converter in pattern.pattern.converters.values():
            assert type(converter).__name__ == "IntConverter", text
        for group in re.findall(r"\(\?P<\w+>([^)]*)\)", text):
            assert group == "[0-9]+" or re.fullmatch(r"\w+(\|\w+)*", group), text


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "/campaigns/1/../../etc/passwd",
        "/campaigns/..%2F..%2Fetc%2Fpasswd/results.csv",
        "/campaigns/results.csv",
        "/campaigns/1.0/results.csv",
        "/campaigns/%EF%BC%91/results.csv",  # full-width 1
        "/campaigns/1/results.csv/../../../settings.py",
        "/static/../webapp/settings.py",
    ],
)
def test_download_urls_with_anything_but_an_id_are_404(client, recorded_campaign, url):
    assert client.get(url).status_code == 404


@pytest.mark.django_db
def test_the_download_file_name_is_made_from_the_id_and_a_slug(alice_client, alice):
    campaign = Campaign.objects.create(owner=alice, name='../../x"; evil\r\nSet-Cookie: a=b')
    response = alice_client.get(reverse("campaign-results-csv", args=[campaign.id]))
    disposition = response["Content-Disposition"]
    assert disposition == (
        f'attachment; filename="gemmforge-campaign-{campaign.id}-x-evil-set-cookie-ab-results.csv"'
    )


# --- Production settings: secrets from the environment, check --deploy clean ---------------------


def production_env(**overrides) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "SECRET_KEY", "DEBUG", "SECURE_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings_production",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="gemmforge.example",
        DATABASE_URL="postgres://gemmforge:from-the-env@db.internal:5432/gemmforge",
        REDIS_URL="redis://broker.internal:6379/0",
    )
    env.update(overrides)
    return {k: v for k, v in env.items() if v is not None}


def manage(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
    assert "WARNINGS" not in result.stderr + result.stdout


def test_check_deploy_warns_with_development_settings():
    """The guard above means something: the plain settings are not deployable as they are."""
    env = production_env(DJANGO_SETTINGS_MODULE="webapp.settings")
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    assert "security.W004" in result.stderr  # no HSTS


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SECRET_KEY": None}, "set the SECRET_KEY environment variable"),
        ({"SECRET_KEY": "short"}, "at least 50 characters"),
        ({"SECRET_KEY": "a" * 60}, "at least 50 characters with at least 5 different"),
        ({"DEBUG": "1"}, "DEBUG must be off"),
    ],
)
def test_production_settings_refuse_a_missing_or_weak_key_and_debug(overrides, message, tmp_path):
    # A key file (what bin/run writes for development) is not read in production.
    (tmp_path / "secret_key").write_text(secrets.token_urlsafe(50))
    env = production_env(SECRET_KEY_FILE=str(tmp_path / "secret_key"), **overrides)
    result = manage("check", env=env)
    assert result.returncode != 0
    assert message in result.stderr


def test_production_settings_take_every_secret_from_the_environment():
    code = (
        "from django.conf import settings as s; "
        "print(s.SECRET_KEY, s.DATABASES['default']['PASSWORD'], s.CELERY_BROKER_URL, s.DEBUG, "
        "s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS)"
    )
    env = production_env(SECRET_KEY="k" * 40 + "abcdefghij")
    result = manage("shell", "-c", code, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == [
        "k" * 40 + "abcdefghij",
        "from-the-env",
        "redis://broker.internal:6379/0",
        "False",
        "True",
        "True",
        "31536000",
    ]


def test_no_secret_is_written_into_the_settings_files():
    for name in ("settings.py", "settings_production.py"):
        text = (ROOT / "webapp" / name).read_text()
        assert not re.search(r"(PASSWORD|SECRET_KEY)\s*=\s*['\"]", text), name
        assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", text), name  # user:password@host


def test_three_users_exist_in_the_fixtures(alice, bob):
    assert get_user_model().objects.count() == 2  # owner, other user; anonymous is no user
