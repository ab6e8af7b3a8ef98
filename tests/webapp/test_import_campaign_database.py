"""manage.py import_results with an engine campaign database (python -m engine optimize --db)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from engine.campaign.storage import SqliteStorage
from engine.outcomes import CandidateRecord
from engine.problem import Problem as EngineProblem
from engine.propose.space import SearchSpace
from engine.publish import report as engine_report
from tests.campaign_dbs import write_campaign
from webapp.campaigns import ratios
from webapp.campaigns.models import BaselineResult, Campaign, Candidate, Problem
from webapp.campaigns.times import campaign_times
from webapp.workers.models import GpuEnvironment

pytestmark = pytest.mark.django_db

RUN10 = Path(settings.BASE_DIR) / "bench/results/2026-12-04-h200-run10/campaign/campaign.sqlite"
RUN10_REPORTS = sorted(
    p for p in RUN10.parent.glob("*.json") if "final" in json.loads(p.read_text())
)
SQUARE = EngineProblem.parse("1024x1024x1024", "nn")
SKINNY = EngineProblem.parse("256x4096x1024", "nn")
WIDE_TN = EngineProblem.parse("2048x2048x2048", "tn")
BASELINES = {
    "torch": 2.0e-5,
    "cublas": 2.1e-5,
    "cublaslt_heuristic": 2.0e-5,
    "cublaslt_autotune": 1.9e-5,
}
ENVIRONMENT = {
    "gpu_name": "NVIDIA H200",
    "arch": "sm_90",
    "driver": "580.159.04",
    "cuda_runtime": "13.0",
    "cublaslt_version": "130100",
    "cutlass_version": "4.2.0",
}


def ok(config, seconds: float, *, proposer: str = "rl", parent: str | None = None, round=0):
    return CandidateRecord(
        name=config.name, family=config.FAMILY, knobs=config.knobs(), proposer=proposer,
        status="ok", reward=-0.1, parent=parent, seconds=seconds, baselines=BASELINES,
        timings={"device": {"seconds": seconds, "baselines": BASELINES}}, gpu_seconds=0.5,
        round=round,
    )  # fmt: skip


def library_configs(problem: EngineProblem, count: int):
    return SearchSpace.library(problem, families=("sm90",)).configs[:count]


def write_alpha(storage: SqliteStorage) -> None:
    """Two NN shapes: three verified kernels, one child of the first, one build failure."""
    storage.open_campaign(
        "alpha", {"name": "alpha", "budget": 5, "mix": {"rl": 0.5, "evolve": 0.5}}
    )
    for problem, status in ((SQUARE, "budget"), (SKINNY, "running")):
        storage.add_problem("alpha", problem)
        first, second, third, child, broken = library_configs(problem, 5)
        failure = CandidateRecord(
            name=broken.name, family=broken.FAMILY, knobs=broken.knobs(), proposer="random",
            status="compile_error", reward=-2.0, reason="nvcc", message="ptxas error",
        )  # fmt: skip
        storage.record(
            "alpha",
            problem.key,
            [ok(first, 2.2e-5), ok(second, 2.0e-5), ok(third, 2.4e-5), failure],
        )
        storage.record(
            "alpha", problem.key, [ok(child, 1.8e-5, proposer="evolve", parent=first.name, round=1)]
        )
        storage.set_problem_status("alpha", problem.key, status)


def write_beta(storage: SqliteStorage) -> None:
    """One TN shape: a library kernel and a model-written source."""
    storage.open_campaign("beta", {"name": "beta", "budget": 2, "mix": {"llm": 1.0}})
    storage.add_problem("beta", WIDE_TN)
    (config,) = library_configs(WIDE_TN, 1)
    written = CandidateRecord(
        name="llm_7f3a", family="llm", knobs={}, proposer="llm", status="ok", reward=0.05,
        seconds=1.5e-5, baselines=BASELINES, timings={"device": {"seconds": 1.5e-5}},
        source="__global__ void llm_7f3a(half* c) {}", meta={"prompt": "make it fast"},
    )  # fmt: skip
    storage.record("beta", WIDE_TN.key, [ok(config, 1.6e-5), written])
    storage.set_problem_status("beta", WIDE_TN.key, "budget")


@pytest.fixture
def engine_db(tmp_path) -> Path:
    path = tmp_path / "run" / "campaign.sqlite"
    storage = SqliteStorage(path)
    write_alpha(storage)
    write_beta(storage)
    storage.close()
    return path


def final_report(
    path: Path,
    cublaslt_kernels: dict | None = None,
    torch_baselines: dict | None = None,
    baselines: dict[str, float] = BASELINES,
) -> None:
    """The engine's --out file beside the database, with a final re-measurement of SQUARE (and
    what cuBLASLt ran, as engine.execution.final records it)."""
    first, second = (c.name for c in library_configs(SQUARE, 2))
    seconds = {f"{b}_nn": t for b, t in baselines.items()}
    seconds |= {f"{b}_tn": t + 1e-6 for b, t in baselines.items()}  # NN is the faster layout
    protocols = {
        "device": {"statistic": "median", "seconds": {**seconds, first: 2.1e-5, second: 1.9e-5}},
        "offline": {"statistic": "mean", "seconds": {**seconds, first: 3.0e-5}},
    }
    report = {
        "settings": {"name": "alpha", "budget": 5},
        "problems": [],
        "final": {SQUARE.key: {"protocols": protocols, "environment": ENVIRONMENT}},
    }
    if cublaslt_kernels:
        report["final"][SQUARE.key]["cublaslt_kernels"] = cublaslt_kernels
    if torch_baselines:
        report["final"][SQUARE.key]["torch_baselines"] = torch_baselines
    (path.parent / "campaign.json").write_text(json.dumps(report))


def test_it_imports_every_candidate_of_an_engine_campaign_database(engine_db, alice):
    call_command("import_results", str(engine_db), owner="alice")
    alpha, beta = Campaign.objects.get(name="alpha"), Campaign.objects.get(name="beta")
    assert (alpha.owner, alpha.status, alpha.layout) == (alice, Campaign.Status.DONE, "nn")
    assert (alpha.budget_per_shape, alpha.proposer_mix) == (5, {"rl": 0.5, "evolve": 0.5})
    assert (alpha.reward_protocol, alpha.search_space) == ("device", "library")
    assert beta.layout == "tn"
    assert alpha.problems.count() == 2
    assert Candidate.objects.filter(problem__campaign=alpha).count() == 10
    assert Candidate.objects.filter(problem__campaign=beta).count() == 2
    square = alpha.problems.get(m=1024, n=1024, k=1024)
    first, _, _, child, broken = library_configs(SQUARE, 5)
    row = square.candidates.get(name=child.name)
    assert (row.parent.name, row.proposer, row.outcome["round"]) == (first.name, "evolve", 1)
    assert row.config == child.knobs()
    assert row.timings["device"]["median_s"] == 1.8e-5
    assert row.reward == pytest.approx(-0.1)
    failed = square.candidates.get(name=broken.name)
    assert (failed.status, failed.compile_status) == ("failed", "error")
    assert failed.failure_reason == "ptxas error"
    assert (square.status, square.stopped) == (Problem.Status.DONE, "budget")
    assert square.best_speedups["cublaslt_autotune"] == pytest.approx(1.9e-5 / 1.8e-5)


def test_a_second_import_updates_without_duplicates(engine_db, alice):
    call_command("import_results", str(engine_db), owner="alice")
    Campaign.objects.update(status=Campaign.Status.FAILED, budget_per_shape=1)
    storage = SqliteStorage(engine_db)  # a resumed session adds a candidate
    (extra,) = library_configs(SQUARE, 6)[5:]
    storage.record("alpha", SQUARE.key, [ok(extra, 1.7e-5, round=2)])
    storage.close()
    call_command("import_results", str(engine_db), owner="alice")
    call_command("import_results", str(engine_db), owner="alice")
    assert Campaign.objects.count() == 2
    assert Problem.objects.count() == 3
    assert Candidate.objects.count() == 13
    alpha = Campaign.objects.get(name="alpha")
    assert (alpha.status, alpha.budget_per_shape) == (Campaign.Status.DONE, 5)
    square = alpha.problems.get(m=1024)
    assert square.best_speedups["cublaslt_autotune"] == pytest.approx(1.9e-5 / 1.7e-5)


def test_it_reports_what_each_import_added(engine_db, alice, capsys):
    call_command("import_results", str(engine_db), owner="alice")
    call_command("import_results", str(engine_db), owner="alice", campaign="beta")
    lines = capsys.readouterr().out.splitlines()
    assert "'alpha': 2 shapes, 10 candidates (10 new), 0 baseline timings" in lines[0]
    assert "'beta': 1 shapes, 2 candidates (2 new)" in lines[1]
    assert "'beta': 1 shapes, 2 candidates (0 new)" in lines[2]


def test_campaign_names_one_campaign_of_the_database(engine_db, alice):
    call_command("import_results", str(engine_db), owner="alice", campaign="beta")
    assert list(Campaign.objects.values_list("name", flat=True)) == ["beta"]
    with pytest.raises(CommandError, match="no campaign 'gamma' in it; it holds 'alpha', 'beta'"):
        call_command("import_results", str(engine_db), owner="alice", campaign="gamma")


def test_it_refuses_a_sqlite_file_that_is_not_a_campaign(tmp_path, alice):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(CommandError, match="not an engine campaign database"):
        call_command("import_results", str(other), owner="alice")
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_text("no database here " * 100)
    with pytest.raises(CommandError, match="not an SQLite database"):
        call_command("import_results", str(garbage), owner="alice")
    empty = tmp_path / "empty.sqlite"
    SqliteStorage(empty).close()
    with pytest.raises(CommandError, match="holds no campaign"):
        call_command("import_results", str(empty), owner="alice")
    with pytest.raises(CommandError, match=r"missing\.sqlite: no such file"):
        call_command("import_results", str(tmp_path / "missing.sqlite"), owner="alice")
    assert not Campaign.objects.exists()


def test_a_candidate_of_an_unknown_family_stops_the_import_and_leaves_nothing(tmp_path, alice):
    path = tmp_path / "future.sqlite"
    unknown = CandidateRecord("hgemm_sm100_x", "sm100", {}, "rl", "ok", 0.1, seconds=1e-5)
    write_campaign(path, "future", {SQUARE: [unknown]}, settings={"budget": 1})
    with pytest.raises(CommandError, match=r"cannot store its candidates.*unknown family 'sm100'"):
        call_command("import_results", str(path), owner="alice")
    assert not Campaign.objects.exists()


def test_a_database_is_recognised_by_its_content_whatever_its_name(engine_db, alice):
    renamed = engine_db.with_name("campaign.data")
    renamed.write_bytes(engine_db.read_bytes())
    call_command("import_results", str(renamed), owner="alice")
    assert Campaign.objects.count() == 2


def test_the_options_of_the_other_input_are_refused(engine_db, alice):
    with pytest.raises(CommandError, match="--name is for a family-sweep report"):
        call_command("import_results", str(engine_db), owner="alice", name="mine")
    report = Path(settings.BASE_DIR) / "bench/results/2026-12-02-h200-families/families-run1.json"
    with pytest.raises(CommandError, match="--campaign is for an engine campaign database"):
        call_command("import_results", str(report), owner="alice", campaign="alpha")


def test_the_database_file_is_only_read(engine_db, alice):
    before = hashlib.sha256(engine_db.read_bytes()).hexdigest()
    call_command("import_results", str(engine_db), owner="alice")
    assert hashlib.sha256(engine_db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in engine_db.parent.iterdir()) == ["campaign.sqlite"]


def test_an_interrupted_problem_is_imported_as_waiting(engine_db, alice):
    call_command("import_results", str(engine_db), owner="alice")
    skinny = Problem.objects.get(m=256, n=4096, k=1024)
    assert (skinny.status, skinny.stopped) == (Problem.Status.QUEUED, "")
    assert skinny.candidates.count() == 5


def test_a_model_written_candidate_keeps_its_source(engine_db, alice):
    call_command("import_results", str(engine_db), owner="alice")
    written = Candidate.objects.get(name="llm_7f3a")
    assert written.source == "__global__ void llm_7f3a(half* c) {}"
    assert written.outcome["meta"] == {"prompt": "make it fast"}


def test_the_final_report_beside_the_database_gives_baselines_and_the_gpu(client, engine_db, alice):
    final_report(engine_db)
    call_command("import_results", str(engine_db), owner="alice")
    call_command("import_results", str(engine_db), owner="alice")  # written again in place
    square = Problem.objects.get(m=1024, n=1024, k=1024)
    rows = BaselineResult.objects.filter(m=1024, n=1024, k=1024, layout="nn")
    assert rows.count() == 8  # 4 baselines × 2 variants, each with both protocols
    autotune_tn = rows.get(baseline="cublaslt_autotune", variant="tn")
    assert autotune_tn.timings == {
        "device": {"median_s": pytest.approx(2.0e-5), "statistic": "median"},
        "offline": {"median_s": pytest.approx(2.0e-5), "statistic": "mean"},
    }
    env = GpuEnvironment.objects.get()
    assert (env.name, env.cublas_version) == ("NVIDIA H200", "13.1.0")
    first = square.candidates.get(name=library_configs(SQUARE, 1)[0].name)
    assert first.timings["device"]["median_s"] == 2.2e-5  # the search's time stays
    final_baselines = {b: pytest.approx(t) for b, t in BASELINES.items()}  # NN, the faster
    assert first.timings["device"]["final"] == {
        "seconds": 2.1e-5,
        "statistic": "median",
        "baselines": final_baselines,
        "gpu_environment": env.id,
    }
    assert first.timings["offline"] == {  # only the final timed it offline: no search session
        "final": {
            "seconds": 3.0e-5,
            "statistic": "mean",
            "baselines": final_baselines,
            "gpu_environment": env.id,
        }
    }
    page = client.get(reverse("candidate-detail", args=[first.id])).content.decode()
    assert "×0.905" in page  # device, final session: autotune's 1.9e-5 s over 2.1e-5 s
    assert "×0.633" in page  # offline, final session: 1.9e-5 s over 3.0e-5 s


def test_the_shape_page_names_the_kernel_cublaslt_ran_where_the_finals_recorded_it(
    client, engine_db, alice
):
    pick = {"algo_id": 66, "label": "algo66 256x128x64 c1x2 s4"}
    heuristic = {"algo_id": 0, "label": "algo0 128x256x64 c2x1 s?"}
    final_report(
        engine_db,
        {
            "cublaslt_autotune_nn": {"autotune": pick, "heuristic": heuristic},
            "cublaslt_autotune_tn": {"autotune": None, "heuristic": None},
        },
    )
    call_command("import_results", str(engine_db), owner="alice")
    rows = BaselineResult.objects.filter(m=1024, n=1024, k=1024, layout="nn")
    assert (
        rows.get(baseline="cublaslt_autotune", variant="nn").timings["device"]["kernel"]
        == (pick["label"])
    )
    assert (
        rows.get(baseline="cublaslt_heuristic", variant="nn").timings["offline"]["kernel"]
        == (heuristic["label"])
    )
    assert "kernel" not in rows.get(baseline="cublaslt_autotune", variant="tn").timings["device"]
    assert "kernel" not in rows.get(baseline="cublas", variant="nn").timings["device"]
    square = Problem.objects.get(m=1024, n=1024, k=1024)
    page = client.get(reverse("problem-detail", args=[square.id])).content.decode()
    assert pick["label"] in page  # NN, the faster layout, is the one shown
    assert "the kernel it ran where a re-measurement recorded it" in page


def test_inductor_and_tunableop_rows_name_what_they_ran(engine_db, alice):
    """The finals' torch-tuned baselines are baselines of the dashboard like the others, with
    Inductor's pick and TunableOp's kernel as the kernel they ran."""
    final_report(
        engine_db,
        torch_baselines={
            "inductor_max_autotune_nn": {
                "tuning_seconds": 5.1,
                "runs": "triton",
                "pick": {"name": "triton_mm_3", "info": {"num_stages": 5, "num_warps": 4}},
            },
            "tunableop_nn": {"tuning_seconds": 0.2, "results": [{"kernel": "Default"}]},
        },
        baselines={**BASELINES, "inductor_max_autotune": 1.8e-5, "tunableop": 2.0e-5},
    )
    call_command("import_results", str(engine_db), owner="alice")
    rows = BaselineResult.objects.filter(m=1024, n=1024, k=1024, layout="nn")
    inductor = rows.get(baseline="inductor_max_autotune", variant="nn").timings["device"]
    assert inductor["median_s"] == 1.8e-5
    assert inductor["kernel"] == "triton triton_mm_3 (num_stages=5, num_warps=4)"
    assert rows.get(baseline="tunableop", variant="nn").timings["device"]["kernel"] == "Default"
    assert "kernel" not in rows.get(baseline="tunableop", variant="tn").timings["device"]


def test_without_recorded_kernels_the_shape_page_names_none(client, engine_db, alice):
    final_report(engine_db)
    call_command("import_results", str(engine_db), owner="alice")
    square = Problem.objects.get(m=1024, n=1024, k=1024)
    page = client.get(reverse("problem-detail", args=[square.id])).content.decode()
    assert "re-measurement recorded it" not in page


def test_every_page_renders_for_an_imported_campaign(client, engine_db, alice):
    final_report(engine_db)
    call_command("import_results", str(engine_db), owner="alice")
    alpha = Campaign.objects.get(name="alpha")
    square = alpha.problems.get(m=1024)
    best = square.candidates.order_by("-reward", "id").first()
    for url in [
        "/",
        reverse("campaign-detail", args=[alpha.id]),
        reverse("problem-detail", args=[square.id]),
        reverse("problem-detail", args=[square.id]) + "?proposer=evolve",
        reverse("candidate-detail", args=[best.id]),
        reverse("candidate-detail", args=[Candidate.objects.get(name="llm_7f3a").id]),
        reverse("campaign-results-csv", args=[alpha.id]),
        reverse("campaign-results-json", args=[alpha.id]),
        reverse("api-campaign-speedups", args=[alpha.id]),
        reverse("api-campaign-progress", args=[alpha.id]),
        reverse("api-campaign-heatmap", args=[alpha.id]),
        reverse("api-problem-history", args=[square.id]),
        reverse("api-problem-knobs", args=[square.id]),
        reverse("api-campaign-history", args=[alpha.id]),
        reverse("api-campaign-knobs", args=[alpha.id]),
        reverse("problem-best-kernel", args=[square.id]),
    ]:
        response = client.get(url)
        assert response.status_code == 200, url
    detail = client.get(reverse("campaign-detail", args=[alpha.id])).content.decode()
    assert "NVIDIA H200" in detail
    assert "1024x1024x1024" in detail


def test_if_empty_imports_only_into_an_empty_dashboard(engine_db, alice, capsys):
    call_command("import_results", str(engine_db), owner="alice", campaign="beta", if_empty=True)
    call_command("import_results", str(engine_db), owner="alice", if_empty=True)
    assert list(Campaign.objects.values_list("name", flat=True)) == ["beta"]
    assert "nothing imported" in capsys.readouterr().out


def test_the_recorded_h200_campaign_imports_with_its_final_measurements(client, db):
    call_command("import_results", str(RUN10))
    campaign = Campaign.objects.get()
    assert (campaign.name, campaign.owner.username) == ("nn-8shapes-796986d4", "admin")
    assert (campaign.search_space, campaign.budget_per_shape) == ("library", 64)
    assert campaign.problems.count() == 8
    assert Candidate.objects.filter(problem__campaign=campaign).count() == 512
    assert not Candidate.objects.exclude(status=Candidate.Status.DONE).exists()
    assert Candidate.objects.filter(parent__isnull=False).count() == 16
    assert BaselineResult.objects.count() == 8 * 8  # each with device, offline and server times
    small = campaign.problems.get(m=128, n=1024, k=1024)
    # shown from the final re-measurement, as engine report reads the same run
    device = engine_report.load_results(RUN10_REPORTS)[small.as_engine().key].points["device"]
    assert small.best["session"]["name"] == "final"
    assert small.best["name"] == device.kernel
    assert small.best_speedups == pytest.approx(device.speedups())
    env = GpuEnvironment.objects.get()
    assert (env.name, env.driver_version, env.cuda_version) == ("NVIDIA H200", "580.159.04", "13.0")
    detail = client.get(reverse("campaign-detail", args=[campaign.id])).content.decode()
    assert "NVIDIA H200" in detail
    assert "128x1024x1024" in detail
    best = small.candidates.order_by("-reward", "id").first()
    page = client.get(reverse("candidate-detail", args=[best.id])).content.decode()
    assert "offline" in page
    assert "server" in page


GRID64 = Path(settings.BASE_DIR) / "bench/results/grid64/campaign.sqlite"
GRID64_REPORTS = [GRID64.parent / "grid64-nn.json", GRID64.parent / "grid64-tn.json"]


@pytest.mark.slow
def test_the_grid64_campaigns_import_with_the_finals_of_every_shape(client, db):
    """What `bin/run` loads into an empty dashboard: the grid64 campaigns on the H200 (64 NN
    shapes, and the TN quarter: 16 of them), their candidates and, from grid64-nn.json and
    grid64-tn.json beside them, every shape's final re-measurement."""
    call_command("import_results", str(GRID64))
    nn = Campaign.objects.get(name="nn-64shapes-2bacba6c")
    tn = Campaign.objects.get(name="tn-16shapes-1c5e2593")
    assert Campaign.objects.count() == 2
    assert (nn.problems.count(), tn.problems.count()) == (64, 16)
    # 32 a shape, and 16 more on the 25 NN shapes of the 2026-12-05 run's focus (a few were tried
    # before)
    assert Candidate.objects.filter(problem__campaign=nn).count() == 2432
    assert Candidate.objects.filter(problem__campaign=tn).count() == 512
    # the four baselines in both layouts, for each of the 80 (shape, layout) problems
    assert BaselineResult.objects.count() == 80 * 8
    fused = nn.problems.get(m=128, n=128, k=12288)  # 0.42x before the fused reductions
    assert fused.best_speedups["cublaslt_autotune"] > 0.85
    deep = tn.problems.get(m=128, n=128, k=16384)  # deep split-K, reached by the TN search
    assert deep.best_speedups["cublaslt_autotune"] > 0.7
    page = client.get(reverse("campaign-detail", args=[nn.id])).content.decode()
    assert "128x128x12288" in page


@pytest.mark.slow
def test_the_grid64_headline_is_the_one_engine_report_prints(client, db):
    """Both recorded grid64 campaigns re-imported: per shape the same kernel and the same
    device-protocol ratios as ``engine report`` over grid64-nn.json and grid64-tn.json, hence the
    same headline (geomean, faster/tied/slower, worst shape, best TFLOP/s)."""
    call_command("import_results", str(GRID64))
    expected = engine_report.report_headline(
        engine_report.load_results(GRID64_REPORTS), gpu=engine_report.gpu_name(GRID64_REPORTS)
    )
    rows = Problem.objects.values_list("m", "n", "k", "layout", "best")
    imported = ratios.headline_of(rows)
    assert imported.shapes == expected.shapes == 80
    for baseline in ("torch", "cublas", "cublaslt_heuristic", "cublaslt_autotune"):
        ours, theirs = imported.summary(baseline), expected.summary(baseline)
        assert ours.geomean == pytest.approx(theirs.geomean), baseline
        assert ours.counts == theirs.counts, baseline
    assert imported.worst == (expected.worst[0], pytest.approx(expected.worst[1]))
    assert imported.best == (expected.best[0], expected.best[1], pytest.approx(expected.best[2]))
    nn = Campaign.objects.get(name="nn-64shapes-2bacba6c")
    page = client.get(reverse("campaign-detail", args=[nn.id])).content.decode()
    nn_headline = ratios.campaign_headline(campaign=nn).summary("cublaslt_autotune")
    assert f"{nn_headline.geomean:.3f}×" in page


def test_the_campaign_page_says_which_proposers_ran_not_the_mix_it_asked_for(client, db):
    """The TN campaign asked for rl 0.5 + evolve 0.5, but with batch = budget it ran one round:
    the policy and uniform random samples, no evolve."""
    call_command("import_results", str(GRID64), campaign="tn-16shapes-1c5e2593")
    tn = Campaign.objects.get()
    assert tn.proposer_mix == {"rl": 0.5, "evolve": 0.5}
    page = client.get(reverse("campaign-detail", args=[tn.id])).content.decode()
    assert "<code>random</code> 256" in page
    assert "<code>rl</code> 256" in page
    assert "<code>evolve</code>" not in page
    assert "1 search round" in page


def test_an_imported_run_shows_what_its_user_waited_for(engine_db, alice, client):
    final_report(engine_db)
    report_path = engine_db.parent / "campaign.json"
    report = json.loads(report_path.read_text())
    report["throughput"] = {  # engine.commands.optimize_command.felt_times, a finished run
        "setup_seconds": 4.0,
        "search_seconds": 300.0,
        "gpu_busy_seconds": 150.0,
        "first_verified_seconds": 40.0,
        "candidates": 96,
        "final_seconds": 60.0,
        "wall_seconds": 364.0,
        "to_final_seconds": 364.0,
    }
    report_path.write_text(json.dumps(report))
    call_command("import_results", str(engine_db), owner="alice")
    alpha = Campaign.objects.get(name="alpha")
    assert alpha.engine_times["wall_seconds"] == 364.0
    times = campaign_times(campaign=alpha, now=timezone.now())
    assert times is not None
    assert times.gpu_busy_s == 210.0  # the search's GPU time and the whole finals
    assert (times.first_verified_s, times.finals_done_s) == (40.0, 364.0)
    page = client.get(reverse("campaign-detail", args=[alpha.id])).content.decode()
    assert "in its last engine optimize run" in page
    beta = Campaign.objects.get(name="beta")  # its report says nothing of time
    assert campaign_times(campaign=beta, now=timezone.now()) is None


def test_a_run_cut_before_its_finals_has_no_times_to_show(engine_db, alice):
    final_report(engine_db)
    report_path = engine_db.parent / "campaign.json"
    report = json.loads(report_path.read_text())
    report["throughput"] = {"search_seconds": 300.0, "wall_seconds": None, "candidates": 96}
    report_path.write_text(json.dumps(report))
    call_command("import_results", str(engine_db), owner="alice")
    alpha = Campaign.objects.get(name="alpha")
    assert campaign_times(campaign=alpha, now=timezone.now()) is None
