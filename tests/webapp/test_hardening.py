"""Service hardening found by a probe of the running dashboard: launch limits (confirmation,
quota of queued GPU time), form input (shape errors capped, mix sums, bidi controls), login
throttling, the Content-Security-Policy header and JSON errors from the JSON API."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from webapp.campaigns import launch
from webapp.campaigns.forms import CampaignForm
from webapp.campaigns.models import Campaign

LAUNCH = {
    "name": "attention",
    "shapes": "4096x4096x4096",
    "layout": "tn",
    "budget_per_shape": "64",
    "proposer_mix": "rl=1",
    "reward_protocol": "device",
    "launch_without_worker": "on",  # no GPU worker runs in these tests
}
CUDA_L2_MAX = {**LAUNCH, "shapes": "", "preset": "cuda-l2", "budget_per_shape": "4096"}


def form(**fields) -> CampaignForm:
    return CampaignForm(data={**LAUNCH, **fields})


# --- Form input ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_thirty_thousand_junk_shape_lines_give_a_short_page(alice_client):
    junk = "\n".join("x" for _ in range(30_000))
    response = alice_client.post("/campaigns/new/", {**LAUNCH, "shapes": junk})
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count("cannot read shape") == 5
    assert "… and 29995 more" in page
    # the textarea gives the 60 000 characters back; the errors add little (they were 3.36 MB)
    assert len(response.content) - len(junk) < 20_000


def test_grid_value_errors_are_capped_with_a_count_of_the_rest():
    f = form(shapes="", grid_m=" ".join(["q"] * 40), grid_n="64", grid_k="64")
    assert not f.is_valid()
    assert len(f.errors["grid_m"]) == 6
    assert f.errors["grid_m"][-1] == "… and 35 more"


@pytest.mark.parametrize("mix", ["rl=1e308, evolve=1e308", "rl=1.7e308, evolve=1.7e308, random=1"])
def test_a_mix_whose_shares_overflow_is_rejected_not_run_as_the_default(mix):
    f = form(proposer_mix=mix)
    assert not f.is_valid()
    assert "more than a number can hold" in f.errors["proposer_mix"][0]


@pytest.mark.parametrize("mix", ["rl=inf", "rl=nan", "rl=1e309", "rl=-inf, evolve=1"])
def test_non_finite_shares_are_rejected(mix):
    assert "proposer_mix" in form(proposer_mix=mix).errors


def test_large_finite_shares_are_still_normalised():
    f = form(proposer_mix="rl=1e300, evolve=3e300")
    assert f.is_valid(), f.errors
    assert f.cleaned_data["proposer_mix"] == {"rl": 0.25, "evolve": 0.75}


@pytest.mark.parametrize(
    "control", ["\u202e", "\u202a", "\u202b", "\u202c", "\u202d", "\u2066", "\u2067", "\u2068",
                "\u2069", "\u200e", "\u200f", "\u061c"],
)  # fmt: skip
def test_bidi_controls_are_stripped_from_a_name(control):
    f = form(name=f"safe{control}gpj.exe")
    assert f.is_valid(), f.errors
    assert f.cleaned_data["name"] == "safegpj.exe"


def test_a_name_of_bidi_controls_only_is_refused():
    f = form(name="\u202e\u2066 \u202c")
    assert not f.is_valid()
    assert f.errors["name"] == ["Enter a name with visible characters."]


@pytest.mark.django_db
def test_a_launched_name_is_stored_without_its_bidi_controls(alice_client):
    assert alice_client.post("/campaigns/new/", {**LAUNCH, "name": "a\u202eb"}).status_code == 302
    assert Campaign.objects.get().name == "ab"


# --- Large launches: confirmation and the quota of queued GPU time -------------------------------


@pytest.mark.django_db
def test_the_largest_launch_needs_confirmation(alice_client, settings):
    settings.LAUNCH_GPU_QUOTA_HOURS = 10_000
    response = alice_client.post("/campaigns/new/", CUDA_L2_MAX)
    assert response.status_code == 200
    page = response.content.decode()
    assert "estimated at 31.4 days of GPU time, over 24.0 h: tick the box" in page
    assert Campaign.objects.count() == 0
    response = alice_client.post("/campaigns/new/", {**CUDA_L2_MAX, "confirm_large": "on"})
    assert response.status_code == 302
    assert Campaign.objects.get().problems.count() == 1000


def test_a_launch_under_the_threshold_needs_no_confirmation():
    assert form(budget_per_shape="4096").is_valid()  # 1 shape × 4096: 45 min


@pytest.mark.django_db
def test_the_quota_counts_what_unfinished_campaigns_still_owe(alice_client, alice, bob, settings):
    settings.LAUNCH_GPU_QUOTA_HOURS = 1
    settings.LAUNCH_CONFIRM_GPU_HOURS = 0
    half_hour = {**LAUNCH, "confirm_large": "on", "budget_per_shape": "2727"}  # 2727 × 0.66 s
    assert launch.estimated_gpu_seconds(shapes=1, budget_per_shape=2727) == pytest.approx(
        1805, abs=1
    )
    assert alice_client.post("/campaigns/new/", half_hour).status_code == 302
    assert launch.queued_gpu_seconds(owner_id=alice.id) == pytest.approx(1805, abs=1)
    refused = alice_client.post("/campaigns/new/", {**half_hour, "budget_per_shape": "4096"})
    assert refused.status_code == 200
    assert "Over your quota of queued GPU time" in refused.content.decode()
    assert Campaign.objects.count() == 1
    # another user has a quota of their own; a cancelled campaign owes nothing
    assert launch.queued_gpu_seconds(owner_id=bob.id) == 0
    Campaign.objects.update(status=Campaign.Status.CANCELLED)
    assert launch.queued_gpu_seconds(owner_id=alice.id) == 0
    again = alice_client.post("/campaigns/new/", {**half_hour, "budget_per_shape": "4096"})
    assert again.status_code == 302


# --- Login throttling ----------------------------------------------------------------------------


def login(client: Client, username: str, password: str, *, admin: bool = False, ip="10.0.0.1"):
    url = "/admin/login/" if admin else "/accounts/login/"
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=ip)


@pytest.fixture
def root(db):
    return get_user_model().objects.create_superuser("root", password="correct-horse-42")


@pytest.mark.django_db
def test_thirty_wrong_admin_passwords_are_throttled_per_user(client, root, settings):
    settings.LOGIN_FAILURES_PER_USER = 10
    statuses = [login(client, "root", f"guess-{i}", admin=True).status_code for i in range(30)]
    assert statuses[:10] == [200] * 10  # the form again, with "enter a correct username..."
    assert set(statuses[10:]) == {429}
    refused = login(client, "root", "correct-horse-42", admin=True)
    assert refused.status_code == 429  # the right password too, until the window ends
    assert int(refused["Retry-After"]) >= 1
    assert "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    # the same user name through the site's login, and from another address, is throttled too
    assert login(client, "ROOT", "correct-horse-42", ip="10.0.0.2").status_code == 429


@pytest.mark.django_db
def test_failed_logins_are_throttled_per_ip(client, root, alice, settings):
    settings.LOGIN_FAILURES_PER_IP = 5
    for i in range(5):
        assert login(client, f"nobody{i}", "x", ip="10.9.9.9").status_code == 200
    assert login(client, "alice", "wonderland-42", ip="10.9.9.9").status_code == 429
    # another address logs in; the throttled one stays refused
    response = login(Client(), "alice", "wonderland-42", ip="10.9.9.10")
    assert response.status_code == 302


@pytest.mark.django_db
def test_a_good_login_is_not_throttled_and_resets_nothing_it_should_not(client, alice, settings):
    settings.LOGIN_FAILURES_PER_USER = 3
    for _ in range(2):
        assert login(client, "alice", "wrong").status_code == 200
    assert login(client, "alice", "wonderland-42").status_code == 302


@pytest.mark.django_db
def test_the_login_throttle_window_ends(client, alice, settings, monkeypatch):
    import webapp.ratelimit

    settings.LOGIN_FAILURES_PER_USER = 2
    now = [1_800_000_000.0]
    monkeypatch.setattr(webapp.ratelimit.time, "time", lambda: now[0])
    for _ in range(2):
        login(client, "alice", "wrong")
    assert login(client, "alice", "wonderland-42").status_code == 429
    now[0] += settings.LOGIN_FAILURE_WINDOW_SECONDS
    assert login(client, "alice", "wonderland-42").status_code == 302


# --- Content-Security-Policy ----------------------------------------------------------------


def csp_of(response) -> dict[str, str]:
    policy = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in policy.split(";"))


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/", "/campaigns/new/", "/accounts/login/", "/workers/"])
def test_every_page_has_a_content_security_policy(alice_client, url):
    response = alice_client.get(url)
    assert response.status_code == 200
    policy = csp_of(response)
    assert policy["script-src"] == "'self'"  # no inline script runs
    assert policy["object-src"] == "'none'"
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in response["Content-Security-Policy"]


@pytest.mark.django_db
def test_no_page_has_an_inline_script_and_inline_styles_carry_the_nonce(client, recorded_campaign):
    problem = recorded_campaign.problems.first()
    candidate = problem.candidates.exclude(source="").first() or problem.candidates.first()
    for url in ["/", f"/campaigns/{recorded_campaign.id}/", f"/shapes/{problem.id}/",
                f"/candidates/{candidate.id}/", "/campaigns/new/", "/accounts/login/"]:  # fmt: skip
        response = client.get(url, follow=True)
        page = response.content.decode()
        for tag in re.findall(r"<script\b[^>]*>", page):
            assert "src=" in tag or 'type="application/json"' in tag, (url, tag)
        assert not re.search(r"\son[a-z]+=", page), url  # no inline event handlers
        nonce = csp_of(response)["style-src"].split("'nonce-")[1].rstrip("'")
        for tag in re.findall(r"<style\b[^>]*>", page):
            assert f'nonce="{nonce}"' in tag, (url, tag)


@pytest.mark.django_db
def test_each_response_gets_its_own_nonce(client):
    first, second = client.get("/"), client.get("/")
    assert csp_of(first)["style-src"] != csp_of(second)["style-src"]


# --- The JSON API answers errors in JSON ---------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/api/campaigns/999999/speedups.json", 404),
        ("/api/campaigns/999999/progress.json", 404),
        ("/api/shapes/999999/rewards.json", 404),
        ("/api/nothing-here/", 404),
    ],
)
def test_api_404s_are_json(client, url, status):
    response = client.get(url)
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": "not found", "status": 404}


@pytest.mark.django_db
def test_an_api_post_is_refused_in_json_with_allow(client, recorded_campaign):
    response = client.post(f"/api/campaigns/{recorded_campaign.id}/speedups.json")
    assert response.status_code == 405
    assert response.json() == {"error": "method not allowed", "status": 405}
    assert response["Allow"] == "GET"


@pytest.mark.django_db
def test_an_api_server_error_is_json(client, recorded_campaign, monkeypatch):
    from webapp.campaigns import selectors

    def broken(**_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(selectors, "campaign_progress_data", broken)
    client.raise_request_exception = False
    response = client.get(f"/api/campaigns/{recorded_campaign.id}/progress.json")
    assert response.status_code == 500
    assert response.json() == {"error": "internal server error", "status": 500}


@pytest.mark.django_db
def test_a_bad_api_parameter_keeps_its_json_errors(client, recorded_campaign):
    response = client.get(f"/api/campaigns/{recorded_campaign.id}/heatmap.json?k=-4")
    assert response.status_code == 400
    assert "errors" in response.json()


@pytest.mark.django_db
def test_pages_outside_the_api_keep_their_html_404(client):
    response = client.get("/campaigns/999999/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
