"""The dashboard in a real browser: Debian's headless Chromium, driven by Selenium, against a live
server with the recorded H200 run imported.

Needs /usr/bin/chromium and /usr/bin/chromedriver (bin/test installs them with apt-get when it runs
as root). Without them the test skips with the reason, except under CI=true, where it fails.
GEMMFORGE_SCREENSHOTS=1 also saves PNGs of the main pages under docs/screenshots/.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from webapp.campaigns.models import Campaign, Candidate, Problem
from webapp.campaigns.ratios import problem_refresh_best
from webapp.workers.models import WorkerHeartbeat

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1440,900",
]
WAIT_S = 20
SCREENSHOTS = settings.BASE_DIR / "docs" / "screenshots"
PASSWORD = "wonderland-42"  # the alice fixture's


def chromium_missing() -> str:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        return f"{' and '.join(missing)} not found: apt-get install chromium chromium-driver"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -r requirements-dev.txt"
    return ""


@pytest.fixture
def browser() -> Iterator:
    reason = chromium_missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run in CI: {reason}")
        pytest.skip(f"BROWSER TEST NOT RUN: {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver, condition, message: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S).until(condition, message=message)


def present(selector: str):
    """A wait condition: some element matches ``selector``."""
    from selenium.webdriver.common.by import By

    return lambda driver: driver.find_elements(By.CSS_SELECTOR, selector)


# how chromedriver may report an element of the page being left, besides a stale reference
DETACHED = "does not belong to the document"


def shows(selector: str, text: str):
    """A wait condition: an element matching ``selector`` holds ``text`` (an element of the
    page being left counts as not yet)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By

    def condition(driver) -> bool:
        try:
            return any(text in e.text for e in driver.find_elements(By.CSS_SELECTOR, selector))
        except StaleElementReferenceException:
            return False
        except WebDriverException as exc:  # chromedriver 156: "Node with given id does not …"
            if DETACHED in str(exc):
                return False
            raise

    return condition


def css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def chart_points(driver, canvas_id: str) -> int:
    """Waits until Chart.js drew the canvas with data; returns its first dataset's length."""
    script = (
        "const canvas = document.getElementById(arguments[0]);"
        "const chart = canvas && window.Chart && Chart.getChart(canvas);"
        "return chart ? chart.data.datasets[0].data.length : 0;"
    )
    return wait_for(
        driver,
        lambda d: d.execute_script(script, canvas_id),
        f"the chart #{canvas_id} never rendered data",
    )


def loaded(driver, selector: str) -> int:
    """Waits until the element's script marked it loaded (data-loaded); returns that count."""
    return wait_for(
        driver,
        lambda d: int(css(d, selector).get_attribute("data-loaded") or 0),
        f"{selector} never loaded",
    )


def screenshot(driver, name: str) -> None:
    if os.environ.get("GEMMFORGE_SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.execute_script("window.scrollTo(0, 0)")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1440, max(600, min(int(height) + 120, 2400)))
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    driver.set_window_size(1440, 900)


def element_screenshot(driver, selector: str, name: str) -> None:
    """A PNG of one element as it shows in the 1440 × 900 window."""
    if os.environ.get("GEMMFORGE_SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    element = css(driver, selector)
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", element)
    element.screenshot(str(SCREENSHOTS / f"{name}.png"))


def fetch(driver, url: str) -> dict:
    """GET ``url`` from the page (with its session cookie): status, headers we check, body."""
    return driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {credentials: 'same-origin'}).then(async (r) => done({"
        "  status: r.status, type: r.headers.get('content-type'),"
        "  disposition: r.headers.get('content-disposition'), body: await r.text()"
        "})).catch((e) => done({status: 0, body: String(e)}));",
        url,
    )


def test_a_user_launches_a_campaign_and_reads_the_recorded_run(
    browser, live_server, recorded_campaign
):
    from selenium.webdriver.common.keys import Keys

    driver = browser
    base = live_server.url

    # Log in (the launch form redirects there first)
    driver.get(f"{base}/campaigns/new/")
    wait_for(driver, lambda d: "/accounts/login/" in d.current_url, "no redirect to log in")
    css(driver, "#id_username").send_keys("alice")
    css(driver, "#id_password").send_keys(PASSWORD)
    css(driver, "form.stacked button[type=submit]").click()
    # the login page's own URL ends with ?next=/campaigns/new/: wait for the form, not the URL
    wait_for(driver, present("#id_name"), "login failed")

    # Launch a campaign through the form: lines and a grid; the count updates as one types
    css(driver, "#id_name").send_keys("browser launch")
    css(driver, "#id_shapes").send_keys("4096x4096x4096\n8192x1024x4096\n4096x4096x4096")
    for field, values in [("m", "128, 4096"), ("n", "4096"), ("k", "4096")]:
        css(driver, f"#id_grid_{field}").send_keys(values)
    budget = css(driver, "#id_budget_per_shape")
    budget.clear()
    budget.send_keys("64")
    assert css(driver, "#shape-count").text == "3 shapes"  # 4096³ is in both
    assert css(driver, "#gpu-estimate").text == "2 min"  # 3 × 64 × 0.66 s
    css(driver, "#id_shapes").send_keys("\n8x9x8")  # N=9: the server refuses it
    assert css(driver, "#shape-count").text.startswith("3 shapes · 1 not counted")
    css(driver, "#id_shapes").send_keys(Keys.BACKSPACE * 6)
    # No GPU worker is online: the form says so before launch
    warning = css(driver, "#no-worker")
    assert warning.is_displayed()
    assert "No GPU worker of gpu.sm90 is online" in warning.text
    screenshot(driver, "launch-form")
    css(driver, "form.stacked button[type=submit]").click()
    # the checkbox is on the form before the post too: wait for the error the answer carries
    wait_for(driver, present(".has-errors"), "the form did not come back with the error")
    assert "No GPU worker of gpu.sm90 is online" in css(driver, ".has-errors").text
    assert not Campaign.objects.filter(name="browser launch").exists()
    css(driver, "#id_launch_without_worker").click()  # launch it anyway
    css(driver, "form.stacked button[type=submit]").click()
    wait_for(driver, lambda d: "/campaigns/new/" not in d.current_url, "the launch failed")
    launched = Campaign.objects.get(name="browser launch")
    assert driver.current_url.endswith(f"/campaigns/{launched.id}/")
    assert launched.problems.count() == 3  # the duplicates were merged
    assert "2 duplicates merged" in css(driver, ".messages").text

    # It waits for a GPU worker, says since when and what to run to add one
    assert css(driver, "#campaign-status").text == "Waiting for a GPU worker"
    banner = css(driver, "#gpu-wait")
    assert banner.is_displayed()
    assert "waiting for a GPU worker (none online since " in banner.text
    assert "celery -A webapp worker -Q gpu.sm90" in banner.text
    screenshot(driver, "no-gpu-worker")
    now = timezone.now()
    WorkerHeartbeat.objects.create(
        hostname="gpu0@browser", queues=["gpu.sm90"], started=now, last_seen=now
    )

    # Live progress: the page polls and shows what the runner records, without a reload
    first = launched.problems.order_by("k", "m", "n").first()
    Candidate.objects.create(
        problem=first,
        name="timed",
        family="sm90",
        source="",
        source_hash="c" * 64,
        proposer="rl",
        status=Candidate.Status.DONE,
        timings={"device": {"median_s": 1.0e-4, "baselines": {"cublaslt_autotune": 1.031e-4}}},
    )
    problem_refresh_best(problem=first)
    Problem.objects.filter(id=first.id).update(status=Problem.Status.DONE)
    Campaign.objects.filter(id=launched.id).update(status=Campaign.Status.RUNNING)
    driver.execute_script("document.body.dataset.sameDocument = 'yes'")
    wait_for(
        driver,
        lambda d: css(d, "#progress [data-progress=shapes_done]").text == "1",
        "the progress never updated",
    )
    wait_for(
        driver, lambda d: css(d, "#campaign-status").text == "Running", "the status never updated"
    )
    assert not css(driver, "#gpu-wait").is_displayed()  # a worker joined: the banner goes
    assert "×1.031" in css(driver, f"tr[data-problem='{first.id}']").text
    assert driver.execute_script("return document.body.dataset.sameDocument") == "yes"

    # Cancel: the unfinished shapes read Cancelled at once
    css(driver, "form[action$='/cancel/'] button").click()
    # the launch's success message is on the page before the post: wait for the cancel's
    cancelled = shows(".messages", "Campaign is now cancelled")
    wait_for(driver, cancelled, "the cancel did not come back")
    statuses = [
        td.text for td in driver.find_elements("css selector", "#shapes [data-field=status_label]")
    ]
    assert sorted(statuses) == ["Cancelled", "Cancelled", "Done"]
    assert css(driver, "#campaign-status").text == "Cancelled"
    screenshot(driver, "cancelled")

    # Find it in the list, next to the imported run
    driver.get(f"{base}/")
    links = driver.find_elements("css selector", "#campaigns tbody td:first-child a")
    names = [a.text for a in links]
    assert names[:2] == ["browser launch", recorded_campaign.name]
    screenshot(driver, "dashboard")

    # The imported campaign: the headline, the shapes table, the charts and the knob view
    driver.get(f"{base}/campaigns/{recorded_campaign.id}/")
    headline = css(driver, "#headline").text
    assert "geomean vs cuBLASLt (autotuned)" in headline
    for word in ("faster", "tied", "slower"):
        assert word in headline
    assert "TFLOP/s" in headline
    assert chart_points(driver, "speedups-chart") == 16
    assert chart_points(driver, "heatmap-chart") > 0
    assert chart_points(driver, "history-chart") > 0
    assert loaded(driver, "#knobs") > 0
    assert driver.find_elements("css selector", "#knobs figure canvas")
    assert "NVIDIA H200" in css(driver, "#environment").text
    # One colour per baseline, the same on every chart; no legend entry for a baseline this run
    # never timed (Inductor, TunableOp)
    speedups = driver.execute_script(
        "const c = Chart.getChart(document.getElementById('speedups-chart'));"
        "return {labels: c.data.datasets.map((d) => d.label),"
        " colours: c.data.datasets.map((d) => d.borderColor),"
        " ticks: c.scales.y.ticks.map((t) => t.value)};"
    )
    assert speedups["labels"] == [
        "vs cuBLASLt (autotuned)", "vs torch.matmul", "vs cuBLAS", "vs cuBLASLt (heuristic)"
    ]  # fmt: skip
    assert len(set(speedups["colours"])) == 4
    history_colour = driver.execute_script(
        "return Chart.getChart(document.getElementById('history-chart')).data.datasets[0]"
        ".borderColor"
    )
    assert history_colour == speedups["colours"][0]  # cuBLASLt (autotuned) on both
    # The speedup axis is labelled above ×1 as well as below, ×1 once
    ticks = speedups["ticks"]
    assert 1 in ticks
    assert any(t > 1 for t in ticks)
    assert any(t < 1 for t in ticks)
    # Knob box plots: the axis spans the quartiles, not a whisker at ×0.01
    knob_min = driver.execute_script(
        "return Chart.getChart(document.querySelector('#knobs canvas')).scales.y.min"
    )
    assert knob_min > 0.05
    # The shapes table at 1440 px: the shape first, then the reward baseline's column, both in
    # view; scrolled sideways, the shape stays put
    table = driver.execute_script(
        "const box = document.querySelector('#shapes').closest('.table-scroll');"
        "const edge = () => box.getBoundingClientRect();"
        "const head = document.querySelector('#shapes th[data-baseline=cublaslt_autotune]');"
        "const shape = document.querySelector('#shapes tbody .shape-cell');"
        "const before = {right: head.getBoundingClientRect().right, box: edge().right};"
        "box.scrollLeft = box.scrollWidth;"
        "const after = shape.getBoundingClientRect().left - edge().left;"
        "box.scrollLeft = 0;"
        "return {head: before.right, box: before.box, shapeOffset: after,"
        " headers: [...document.querySelectorAll('#shapes thead th')].map((h) => h.textContent)};"
    )
    assert table["head"] <= table["box"]
    assert abs(table["shapeOffset"]) < 2
    assert table["headers"][:2] == ["Shape", "vs cuBLASLt (autotuned)"]
    assert not any("Inductor" in h or "TunableOp" in h for h in table["headers"])
    element_screenshot(driver, ".table-scroll", "shapes-table")
    driver.execute_script(
        "const box = document.querySelector('#shapes').closest('.table-scroll');"
        "box.scrollLeft = box.scrollWidth;"
    )
    element_screenshot(driver, ".table-scroll", "shapes-table-scrolled")
    driver.execute_script(
        "document.querySelector('#shapes').closest('.table-scroll').scrollLeft = 0"
    )
    element_screenshot(driver, ".knob-grid", "knobs")
    # the leaderboard sorts by a column on a click
    css(driver, "#shapes th:last-child").click()
    values = [
        float(td.get_attribute("data-value"))
        for td in driver.find_elements("css selector", "#shapes tbody td:last-child")
        if td.get_attribute("data-value")
    ]
    assert values == sorted(values)
    screenshot(driver, "campaign")

    # The CSV download, with the session cookie
    href = css(driver, "a[href$='results.csv']").get_attribute("href")
    csv = fetch(driver, href)
    assert csv["status"] == 200
    assert csv["type"].startswith("text/csv")
    assert f"gemmforge-campaign-{recorded_campaign.id}-" in csv["disposition"]
    lines = csv["body"].strip().splitlines()
    assert lines[0].startswith("campaign_id,shape,m,n,k,layout")
    assert len(lines) == 1 + 334

    # A shape: the candidate table and the reward curve
    driver.find_element("link text", "4096x4096x4096").click()
    wait_for(driver, lambda d: "/shapes/" in d.current_url, "the shape link did not open")
    assert chart_points(driver, "problem-history-chart") > 0
    assert loaded(driver, "#knobs") > 0
    rows = driver.find_elements("css selector", "#candidates tbody tr")
    assert len(rows) > 1
    screenshot(driver, "shape")

    # Its second-best candidate: config, verdict, timings, and its diff against the best
    css(driver, "#candidates tbody tr:nth-child(2) td:first-child a").click()
    wait_for(driver, lambda d: "/candidates/" in d.current_url, "the candidate link did not open")
    assert '"tile_m"' in css(driver, "#config").text
    assert "passed" in css(driver, "#verification").text
    assert css(driver, "#timings tbody tr")
    diff = css(driver, "#diff-best")
    assert "config JSON" in diff.text
    assert diff.find_elements("css selector", ".diff-unified .diff-add")
    diff.find_element("css selector", "details:not([open]) summary").click()  # side by side
    side = diff.find_element("css selector", ".diff-side table.diff")
    assert side.is_displayed()
    assert side.find_elements("css selector", ".diff_chg, .diff_add, .diff_sub")
    screenshot(driver, "candidate")

    browser_errors = [
        entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"
    ]
    assert not browser_errors, browser_errors


def test_a_1000_shape_campaign_reads_at_a_glance(browser, live_server, alice):
    """The CUDA-L2 preset's 1000 shapes (synthetic: recorded grid64 candidates, times scaled to
    each shape): the headline, a readable speedup chart, the history and the knob view."""
    import io

    from django.core.management import call_command

    call_command(
        "make_fixture_campaign", grid="cuda-l2", per_shape=10, owner="alice", stdout=io.StringIO()
    )
    campaign = Campaign.objects.get(name__contains="1000 shapes")
    driver = browser
    driver.get(f"{live_server.url}/campaigns/{campaign.id}/")
    shown = re.search(r"of (\d+) shapes", css(driver, "#headline").text)
    assert shown
    assert int(shown.group(1)) > 900
    assert chart_points(driver, "speedups-chart") > 900
    assert chart_points(driver, "history-chart") > 0
    assert chart_points(driver, "heatmap-chart") == 100  # 10 × 10 (M, N) at one K
    assert loaded(driver, "#knobs") > 0
    screenshot(driver, "campaign-1000-shapes")
    driver.get(f"{live_server.url}/")
    assert "no data yet" not in css(driver, "#campaigns").text
    screenshot(driver, "dashboard-1000-shapes")
    browser_errors = [
        entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"
    ]
    assert not browser_errors, browser_errors
