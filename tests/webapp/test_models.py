from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError

from engine.problem import Layout as EngineLayout
from webapp.campaigns.models import BaselineResult, Campaign, Candidate, Problem
from webapp.campaigns.selectors import candidates_best_first
from webapp.workers.models import GpuEnvironment, WorkerHeartbeat

pytestmark = pytest.mark.django_db


def make_candidate(problem, name, reward, source=None):
    return Candidate.objects.create(
        problem=problem,
        name=name,
        family="cutlass_sm90",
        source=source or f"// {name}",
        source_hash=f"{hash(source or name) & 0xFFFFFFFF:064x}",
        proposer="policy",
        reward=reward,
    )


def h200() -> GpuEnvironment:
    return GpuEnvironment.objects.create(
        name="NVIDIA H200",
        arch="sm_90",
        driver_version="580.65",
        cuda_version="13.0",
        cublas_version="13.0.0",
        cutlass_version="4.2.0",
        clocks={"sm_mhz": 1980},
    )


def test_migrations_match_the_models():
    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO())


def test_a_created_campaign_is_queued_with_its_problems(queued_campaign):
    assert queued_campaign.status == Campaign.Status.QUEUED
    shapes = [(p.shape, p.layout, p.status) for p in queued_campaign.problems.all()]
    assert shapes == [("4096x11008x4096", "tn", "queued"), ("16x4096x4096", "tn", "queued")]


def test_a_problem_converts_to_the_engine_problem(queued_campaign):
    problem = queued_campaign.problems.first()
    engine_problem = problem.as_engine()
    assert (engine_problem.m, engine_problem.n, engine_problem.k) == (4096, 11008, 4096)
    assert engine_problem.layout is EngineLayout.TN
    assert str(problem) == engine_problem.key


def test_it_rejects_the_same_shape_twice_in_one_campaign(queued_campaign):
    with pytest.raises(IntegrityError):
        Problem.objects.create(campaign=queued_campaign, m=16, n=4096, k=4096, layout="tn")


def test_candidates_order_by_reward_best_first_unrewarded_last(queued_campaign):
    problem = queued_campaign.problems.first()
    make_candidate(problem, "slow", 0.8)
    make_candidate(problem, "pending", None)
    make_candidate(problem, "fast", 1.2)
    assert [c.name for c in candidates_best_first(problem=problem)] == ["fast", "slow", "pending"]


def test_it_rejects_the_same_source_twice_for_one_problem(queued_campaign):
    problem = queued_campaign.problems.first()
    make_candidate(problem, "a", 1.0, source="same")
    with pytest.raises(IntegrityError):
        make_candidate(problem, "b", 1.0, source="same")


def test_a_candidate_keeps_its_parent_and_results(queued_campaign):
    problem = queued_campaign.problems.first()
    parent = make_candidate(problem, "parent", 1.0)
    child = make_candidate(problem, "child", 1.1)
    child.parent = parent
    child.compile_status = Candidate.CompileStatus.OK
    child.compile_result = {"registers": 168, "spills": 0}
    child.timings = {"cold_l2_median": {"median_us": 812.5}}
    child.save()
    child.refresh_from_db()
    assert child.parent == parent
    assert list(parent.children.all()) == [child]
    assert child.compile_result["registers"] == 168
    parent.delete()
    child.refresh_from_db()
    assert child.parent is None


def test_a_baseline_result_belongs_to_a_gpu_environment():
    env = h200()
    result = BaselineResult.objects.create(
        m=4096,
        n=4096,
        k=4096,
        layout="nn",
        baseline=BaselineResult.Baseline.CUBLASLT_AUTOTUNE,
        variant="tn",
        timings={"cold_l2_median": {"median_us": 140.2}},
        gpu_environment=env,
    )
    assert list(env.baselines.all()) == [result]
    assert str(result) == "cublaslt_autotune 4096x4096x4096_nn (tn)"


def test_it_rejects_a_duplicate_gpu_environment():
    h200()
    with pytest.raises(IntegrityError):
        h200()


def test_a_heartbeat_serves_gpu_only_when_it_consumes_a_gpu_queue():
    assert WorkerHeartbeat(hostname="a", queues=["gpu.sm90", "default"]).serves_gpu
    assert not WorkerHeartbeat(hostname="b", queues=["default", "compile"]).serves_gpu
