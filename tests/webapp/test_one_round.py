"""The dashboard's campaigns run engine.campaign.round's rounds, the ones `engine optimize` runs:
the same settings and seed give the same candidates in the same order, through eager tasks and
through real Celery workers (PostgreSQL, Redis, the GPU step replayed from the recorded H200 run);
and the arch's policy learns across dashboard campaigns."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine import cli
from engine.campaign.round import Round, RoundSettings
from engine.campaign.storage import SqliteStorage
from engine.problem import Problem as EngineProblem
from engine.propose.policy import (
    Policy,
    PolicyFile,
    policy_families,
    policy_path,
    pretrained_path,
)
from engine.propose.proposers import PolicyProposer
from engine.propose.space import SearchSpace
from tests.webapp.test_faults import (  # noqa: F401  (services: the fixture)
    ROOT,
    Stack,
    campaign_status,
    services,
    wait_until,
)
from webapp.campaigns import work
from webapp.campaigns.models import Campaign, Candidate
from webapp.campaigns.services import campaign_create

RECORDED_RUN = "bench/results/2026-12-02-h200-families/families-run1.json"
SHAPE = "4096x4096x4096"
MIX = {"rl": 0.5, "evolve": 0.3, "random": 0.2}
SEED = 7
BUDGET = 16  # batch 4: four rounds, so the policy learns and evolve mutates within the shape


@pytest.fixture
def replay(settings, tmp_path, monkeypatch):
    settings.GEMMFORGE_EXECUTOR = f"replay:{RECORDED_RUN}"
    settings.GEMMFORGE_BATCH_SIZE = 8
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "web-cache"))
    return tmp_path / "web-cache"


def cli_candidates(tmp_path, monkeypatch, *, shape=SHAPE, seed=SEED) -> list[tuple[str, str]]:
    """(name, proposer) of every candidate `engine optimize` tries, in order, with its own
    policy file (started, like the web's, from the shipped pretrained policy)."""
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cli-cache"))
    db = tmp_path / "cli.sqlite"
    mix = ",".join(f"{k}={v}" for k, v in MIX.items())
    args = ["optimize", "--shapes", shape, "--layout", "tn", "--budget", str(BUDGET),
            "--mix", mix, "--seed", str(seed), "--replay", str(ROOT / RECORDED_RUN),
            "--db", str(db), "--out", str(tmp_path / "cli.json"), "--name", "parity"]  # fmt: skip
    assert cli.main(args) == 0
    storage = SqliteStorage(db)
    records = storage.candidates("parity", EngineProblem.parse(shape, "tn").key)
    storage.close()
    return [(r.name, r.proposer) for r in records]


def web_candidates(campaign_id: int) -> list[tuple[str, str]]:
    rows = Candidate.objects.filter(problem__campaign_id=campaign_id).order_by("id")
    return list(rows.values_list("name", "proposer"))


def launch(owner, *, shape=SHAPE, seed=SEED, mix=None, budget=BUDGET, name="parity") -> Campaign:
    return campaign_create(
        owner=owner,
        name=name,
        layout="tn",
        problems=[EngineProblem.parse(shape, "tn")],
        budget_per_shape=budget,
        proposer_mix=mix or MIX,
        seed=seed,
    )


def run_everything(capture) -> None:
    with capture(execute=True):
        work.work_requeue()


@pytest.mark.slow
def test_a_dashboard_campaign_proposes_what_engine_optimize_proposes(
    alice, replay, tmp_path, monkeypatch, django_capture_on_commit_callbacks
):
    campaign = launch(alice)
    run_everything(django_capture_on_commit_callbacks)
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.DONE
    web = web_candidates(campaign.id)
    assert len(web) == BUDGET
    assert {p for _, p in web} == set(MIX)  # every proposer had its share
    rounds = sorted(set(Candidate.objects.values_list("outcome__round", flat=True)))
    assert rounds == [0, 1, 2, 3]
    assert cli_candidates(tmp_path, monkeypatch) == web


@pytest.mark.slow
def test_another_seed_proposes_other_candidates(
    alice, replay, tmp_path, monkeypatch, django_capture_on_commit_callbacks
):
    campaign = launch(alice, seed=SEED + 1)
    run_everything(django_capture_on_commit_callbacks)
    assert cli_candidates(tmp_path, monkeypatch) != web_candidates(campaign.id)


@pytest.mark.slow
def test_a_second_campaign_proposes_from_the_policy_the_first_one_updated(
    alice, replay, django_capture_on_commit_callbacks
):
    families = policy_families("sm_90")
    path = policy_path(replay, "sm_90")
    assert not path.exists()
    first = launch(alice, mix={"rl": 1.0}, name="first")
    run_everything(django_capture_on_commit_callbacks)
    assert Campaign.objects.get(id=first.id).status == Campaign.Status.DONE
    after_first = Policy.load(path, families)
    assert after_first is not None  # the compile steps saved what the GPU steps' rewards taught
    assert after_first.applied == {f"campaign-{first.id}/{SHAPE}_tn": 3}  # four rounds, once each
    start = PolicyFile(path.with_name("none.pt"), families, start=pretrained_path("sm_90")).policy
    assert after_first.updates == start.updates + 4
    saved = path.read_bytes()

    new_shape = "1024x1024x1024"
    second = launch(alice, shape=new_shape, mix={"rl": 1.0}, name="second")
    run_everything(django_capture_on_commit_callbacks)
    proposed = [n for n, _ in web_candidates(second.id)][:4]  # its first round
    assert path.read_bytes() != saved  # the second campaign's round was learnt too

    problem = EngineProblem.parse(new_shape, "tn")
    from webapp.campaigns.runner import replay_table

    table = replay_table(f"replay:{ROOT / RECORDED_RUN}")
    space = SearchSpace.from_configs(problem, table.configs_for(problem))

    def round0(policy: Policy) -> list[str]:
        # the policy's draw, with the family floor (each family until measured) the round adds
        settings = RoundSettings(budget=16, batch_size=4, mix={"rl": 1.0}, seed=second.seed)
        round_ = Round(settings, {"rl": PolicyProposer(policy)})
        picks = round_.propose(problem, space, [], round_no=0, exclude=set())
        return [p.config.name for p in picks]

    assert proposed == round0(after_first)
    assert proposed != round0(start)


CREATE = """
import json, sys
from django.contrib.auth import get_user_model
from engine.problem import Problem
from webapp.campaigns.services import campaign_create
owner, _ = get_user_model().objects.get_or_create(username="parity")
c = campaign_create(owner=owner, name="parity", layout="tn",
                    problems=[Problem.parse(sys.argv[1], "tn")], budget_per_shape=int(sys.argv[2]),
                    proposer_mix=json.loads(sys.argv[3]), seed=int(sys.argv[4]))
print(json.dumps({"id": c.id}))
"""


@pytest.mark.slow
def test_real_celery_workers_propose_what_engine_optimize_proposes(
    services,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    env, conn, _ = services
    env = {**env, "ENGINE_CACHE_DIR": str(tmp_path / "web-cache"), "GEMMFORGE_BATCH_SIZE": "8"}
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); exec(open(0).read())",
         SHAPE, str(BUDGET), json.dumps(MIX), str(SEED)],
        input=CREATE, cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    campaign_id = json.loads(out.strip().splitlines()[-1])["id"]
    stack = Stack(env, tmp_path)
    try:
        stack.worker("w1")
        stack.worker("w2")
        stack.beat()
        wait_until(
            lambda: campaign_status(conn, campaign_id) in ("done", "failed"),
            "the campaign",
            stack,
            timeout_s=240,
        )
    finally:
        stack.close()
    assert campaign_status(conn, campaign_id) == "done"
    web = conn.execute(
        "SELECT c.name, c.proposer FROM campaigns_candidate c JOIN campaigns_problem p "
        "ON c.problem_id = p.id WHERE p.campaign_id = %s ORDER BY c.id",
        (campaign_id,),
    ).fetchall()
    assert len(web) == BUDGET
    assert cli_candidates(tmp_path, monkeypatch) == [tuple(row) for row in web]


def test_the_launch_protocol_is_the_one_the_gpu_step_child_times(alice, replay, tmp_path):
    from engine.timing.protocol_names import PROTOCOLS
    from webapp.campaigns import launch, runner

    assert launch.REWARD_PROTOCOLS is PROTOCOLS  # the form offers the engine's, nothing else
    campaign = campaign_create(
        owner=alice,
        name="graph",
        layout="tn",
        problems=[EngineProblem.parse(SHAPE, "tn")],
        reward_protocol="graph",
    )
    args = runner.step_args("local", SHAPE + "_tn", tmp_path, protocol=campaign.reward_protocol)
    assert args[args.index("--protocol") + 1] == "graph"
