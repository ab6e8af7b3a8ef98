"""Prompts, code extraction and the LLM proposer inside a real campaign (fake nvcc and GPU)."""

from __future__ import annotations

import pytest

from engine import abi
from engine.campaign.loop import Campaign, CampaignSettings
from engine.campaign.storage import SqliteStorage
from engine.compilation.source_kernel import SourceKernel
from engine.llm.evaluate import ChainEvaluator, SourceCompiler
from engine.llm.extract import NO_CODE, check_answer, extract_source
from engine.llm.prompt import GpuFacts, KernelExample, PromptContext, build_messages
from engine.llm.proposer import LLMProposer
from engine.problem import Problem
from engine.propose.space import SearchSpace
from tests.engine.llm_fakes import (
    BROKEN_KERNEL,
    CHEAT_KERNEL,
    GOOD_KERNEL,
    WRONG_KERNEL,
    FakeBuilder,
    FakeExecutor,
    ScriptedBackend,
    fenced,
    library_passes,
)

PROBLEM = Problem.parse("4096x4096x1024", "tn")


def test_the_prompt_holds_problem_gpu_contract_best_topk_and_last_error():
    best = KernelExample(
        "sm90_best",
        GOOD_KERNEL,
        speedups={"cublaslt_autotune": 1.07},
        seconds=1e-4,
        ptxas="k (sm_90a): 168 registers, 0 B static smem, 0 B stack",
    )
    slow = KernelExample("sm80_slow", None, speedups={"cublaslt_autotune": 0.41}, seconds=3e-4)
    ctx = PromptContext(
        PROBLEM,
        GpuFacts.h200(),
        best=best,
        examples=[best, slow],
        last_error="candidate llm_1: wrong: max error 3.5",
    )
    system, user = build_messages(ctx)
    text = user["content"]
    assert system["role"] == "system"
    for expected in (
        "M=4096, N=4096, K=1024",
        "TN",
        "132 SMs",
        "227 KiB per block",
        abi.CONTRACT,
        "GEMMFORGE_DEFINE_ABI_VERSION",
        "sm90_best",
        "1.070x cublaslt_autotune",
        "168 registers",
        "sm80_slow",
        "0.410x",
        "max error 3.5",
        "```cuda",
    ):
        assert expected in text, expected


@pytest.mark.parametrize(
    ("answer", "how"),
    [
        (fenced(GOOD_KERNEL), "fenced"),
        ("```python\nprint(1)\n```\n" + fenced(GOOD_KERNEL) + "```\nnvcc x.cu\n```", "fenced"),
        ("<think>```cuda\nold\n```</think>" + fenced(GOOD_KERNEL), "fenced"),
        ("Sure:\n```cuda\n" + GOOD_KERNEL, "unclosed_fence"),
        ("~~~~cpp\n" + GOOD_KERNEL + "~~~~\n", "fenced"),
        ("Kernel follows.\n" + GOOD_KERNEL, "bare"),
    ],
    ids=["plain", "several-blocks", "think", "unclosed", "tildes", "bare"],
)
def test_it_extracts_the_kernel_from_answers_of_many_shapes(answer, how):
    extraction = extract_source(answer)
    assert extraction.how == how
    assert extraction.source.strip() == GOOD_KERNEL.strip()
    assert check_answer(answer).ok


@pytest.mark.parametrize(
    "answer", ["", "   ", "I cannot do that.", "```python\nprint(1)\n```", "```cuda\nint x;\n```"]
)
def test_answers_without_a_kernel_are_data(answer):
    checked = check_answer(answer)
    assert not checked.ok
    assert checked.reason in (NO_CODE, "llm_empty")


def test_the_static_gate_runs_on_the_extracted_source():
    checked = check_answer(fenced(CHEAT_KERNEL))
    assert not checked.ok
    assert checked.reason == "static_api"
    assert "cudaStreamCreate" in checked.message


def test_source_kernels_are_named_by_their_source():
    a = SourceKernel(GOOD_KERNEL, PROBLEM.layout)
    assert a.name == SourceKernel(GOOD_KERNEL, PROBLEM.layout).name
    assert a.name.startswith("llm_")
    assert a.name != SourceKernel(BROKEN_KERNEL, PROBLEM.layout).name
    assert a.render() == GOOD_KERNEL


def _campaign(tmp_path, backend, *, budget=6, batch=2, max_turns=2):
    builder = FakeBuilder(tmp_path)
    compiler = SourceCompiler(builder=builder, library_check=library_passes)
    proposer = LLMProposer(backend, compiler=compiler, max_turns=max_turns)
    storage = SqliteStorage(tmp_path / "c.sqlite")
    campaign = Campaign(
        [PROBLEM],
        settings=CampaignSettings(
            name="llm", budget=budget, batch_size=batch, mix={"llm": 1.0}, pipeline=False
        ),
        executor=FakeExecutor(),
        storage=storage,
        proposers={"llm": proposer},
        space_for=lambda p: SearchSpace.full(p, families=("sm80",)),
        compiler=compiler,
    )
    return campaign, storage, builder


def test_an_llm_campaign_records_every_candidate_with_its_failure_reason(tmp_path):
    backend = ScriptedBackend(
        [
            fenced(BROKEN_KERNEL),  # round 1: compile error
            fenced(WRONG_KERNEL),  # round 1: fails verification
            fenced(GOOD_KERNEL),  # round 2: the repair of the compile error → measured
            "still nothing",  # round 2: repair of the wrong kernel: no code, …
            fenced(CHEAT_KERNEL),  # … then a cheat on its last turn → static rejection
            None,  # round 3: the backend times out
        ]
    )
    campaign, storage, builder = _campaign(tmp_path, backend, budget=5, max_turns=3)
    (result,) = campaign.run()
    records = storage.candidates("llm", PROBLEM.key)
    assert len(records) == 5
    by_reason = {r.reason or r.status: r for r in records}
    assert set(by_reason) == {"nvcc", "wrong", "ok", "static_api", "llm_backend"}
    assert by_reason["ok"].source == GOOD_KERNEL
    assert by_reason["ok"].parent == by_reason["nvcc"].name  # a repair of that candidate
    assert by_reason["ok"].meta["answer"] == fenced(GOOD_KERNEL)
    assert "expected a" in by_reason["ok"].meta["messages"][-1]["content"]  # the nvcc log
    assert by_reason["static_api"].status == "rejected"
    assert "timed out" in by_reason["llm_backend"].message
    assert CHEAT_KERNEL not in builder.built
    assert result.stopped == "budget"
    storage.close()


def test_the_chain_evaluator_gates_compiles_verifies_and_rewards(tmp_path):
    builder = FakeBuilder(tmp_path)
    evaluator = ChainEvaluator(
        executor=FakeExecutor(),
        compiler=SourceCompiler(builder=builder, library_check=library_passes),
    )
    good = evaluator.evaluate(PROBLEM, GOOD_KERNEL)
    assert good.stage == "measured"
    assert good.speedups["cublaslt_autotune"] == pytest.approx(2.718281828**good.reward)
    assert evaluator.evaluate(PROBLEM, BROKEN_KERNEL).stage == "compile"
    assert evaluator.evaluate(PROBLEM, WRONG_KERNEL).reason == "wrong"
    cheat = evaluator.evaluate(PROBLEM, CHEAT_KERNEL)
    assert (cheat.stage, cheat.reason) == ("static", "static_api")
    assert cheat.reward < evaluator.failure_reward
    assert CHEAT_KERNEL not in builder.built


def test_train_llm_is_a_command():
    from engine.cli import build_parser

    args = build_parser().parse_args(
        ["train-llm", "--model", "m", "--shapes", "256x256x256", "--output", "out", "--steps", "1"]
    )
    assert args.func.__module__ == "engine.commands.train_llm_command"
    assert (args.steps, args.generations, args.layout) == (1, 8, "tn")


def test_the_prompt_names_the_kernel_cublaslt_runs_on_the_problem_when_known():
    kernel = {"algo_id": 66, "label": "algo66 256x128x64 c1x2 s4"}
    proposer = LLMProposer(
        ScriptedBackend([]), notes="be brief", cublaslt_kernels={PROBLEM.key: [kernel]}
    )
    (_, user) = build_messages(proposer.context(PROBLEM, []))
    assert "## Notes\nbe brief\ncuBLASLt, the baseline to beat" in user["content"]
    assert "algo66 256x128x64 c1x2 s4" in user["content"]
    other = Problem.parse("1024x1024x1024", "tn")
    assert proposer.context(other, []).notes == "be brief"


def test_the_prompt_learns_what_cublaslt_ran_from_a_gpu_step():
    proposer = LLMProposer(ScriptedBackend([]))
    assert proposer.context(PROBLEM, []).notes == ""
    measured = {"algo_id": 3, "label": "algo3 128x256x64 c2x1 s?"}
    proposer.learn_cublaslt_kernels(
        PROBLEM, {"cublaslt_autotune_tn": {"autotune": measured, "heuristic": None}}
    )
    assert "algo3 128x256x64 c2x1 s?" in proposer.context(PROBLEM, []).notes
