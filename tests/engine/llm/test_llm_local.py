"""The local transformers backend and one GRPO step, with a tiny model built here (no downloads)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

import torch

from engine.llm.backends import (
    CHECKPOINT_META,
    GenerationSettings,
    TransformersBackend,
    make_backend,
)
from engine.llm.evaluate import ChainEvaluator, SourceCompiler
from engine.llm.tiny import build_tiny_model
from engine.llm.train import TrainSettings, train_grpo
from engine.problem import Problem
from tests.engine.llm_fakes import FakeBuilder, FakeExecutor, library_passes


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def tiny():
    """A 2-layer Llama (hidden 32) and a word-level tokenizer, both built here."""
    return build_tiny_model()


def test_local_backend_generates_and_counts_tokens(tiny):
    model, tokenizer = tiny
    backend = TransformersBackend(
        model, tokenizer, generation=GenerationSettings(max_new_tokens=12, seed=1)
    )
    completion = backend.complete([{"role": "user", "content": "write a kernel"}])
    assert completion.ok
    assert isinstance(completion.text, str)
    assert 0 < completion.completion_tokens <= 12
    assert completion.prompt_tokens > 0
    assert backend.usage.calls == 1
    assert backend.usage.completion_tokens == completion.completion_tokens


def test_one_grpo_step_reaches_the_trainer_and_changes_the_lora_weights(tiny, tmp_path):
    model, tokenizer = tiny
    executor = FakeExecutor()
    evaluator = ChainEvaluator(
        executor=executor,
        compiler=SourceCompiler(builder=FakeBuilder(tmp_path), library_check=library_passes),
    )
    seen: dict[str, torch.Tensor] = {}

    from transformers import TrainerCallback

    class Snapshot(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            for name, p in model.named_parameters():
                if "lora_" in name:
                    seen[name] = p.detach().clone()

    import trl

    original = trl.GRPOTrainer.__init__

    def with_snapshot(self, *args, **kwargs):
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), Snapshot()]
        original(self, *args, **kwargs)

    trl.GRPOTrainer.__init__ = with_snapshot
    try:
        result = train_grpo(
            model,
            tokenizer,
            [Problem.parse("256x256x256", "tn")],
            evaluator,
            output_dir=tmp_path / "run",
            settings=TrainSettings(
                steps=1,
                num_generations=8,
                max_completion_length=24,
                learning_rate=5e-2,
                lora_r=4,
                lora_alpha=8,
                target_modules=["q_proj", "v_proj"],
                save_steps=1,
                use_cpu=True,
            ),
            base_model=str(tmp_path / "base"),
        )
    finally:
        trl.GRPOTrainer.__init__ = original

    rewards = [e["reward"] for e in result.rewards.entries]
    assert len(rewards) == 8
    stages = {e["stage"] for e in result.rewards.entries}
    assert "measured" in stages  # some answers went the whole chain
    assert executor.executed  # the executor saw them
    logged = result.log_history[0]
    assert logged["reward"] == pytest.approx(sum(rewards) / len(rewards), rel=1e-4)
    assert logged["reward_std"] > 0  # GRPO had advantages to work with
    trained = result.final_checkpoint
    assert (trained / "adapter_config.json").is_file()
    assert json.loads((trained / CHECKPOINT_META).read_text())["base_model"] == str(
        tmp_path / "base"
    )
    assert (tmp_path / "run" / "checkpoint-1" / CHECKPOINT_META).is_file()
    from safetensors.torch import load_file

    saved = load_file(str(trained / "adapter_model.safetensors"))
    assert seen
    changed = [
        name
        for name, before in seen.items()
        if not torch.equal(before, saved[_saved_name(name, saved)])
    ]
    assert changed, "no LoRA weight moved"


def _saved_name(name: str, saved: dict) -> str:
    """peft saves 'base_model.model.x.lora_A.weight' for the live 'x.lora_A.default.weight'."""
    plain = name.replace(".default", "")
    for key in saved:
        if plain.endswith(key.removeprefix("base_model.model.")) or key.endswith(plain):
            return key
    raise KeyError(name)


def test_a_trained_checkpoint_loads_as_the_local_backend(tiny, tmp_path):
    model, tokenizer = tiny
    base = tmp_path / "base"
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(
        model, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)
    )
    checkpoint = tmp_path / "final"
    peft_model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    (checkpoint / CHECKPOINT_META).write_text(json.dumps({"base_model": str(base)}))

    backend = make_backend(
        {"kind": "local", "model": str(checkpoint), "generation": {"max_new_tokens": 4}}
    )
    assert backend.name.startswith("local:")
    completion = backend.complete([{"role": "user", "content": "write a kernel"}])
    assert completion.ok
    from peft import PeftModel

    assert isinstance(backend.model, PeftModel)
