"""The local transformers backend and one GRPO step, with a tiny model built here (no downloads)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

import torch
from llm_fakes import FakeBuilder, FakeExecutor, library_passes

from engine.llm.backends import (
    CHECKPOINT_META,
    GenerationSettings,
    TransformersBackend,
    make_backend,
)
from engine.llm.evaluate import ChainEvaluator, SourceCompiler
from engine.llm.train import TrainSettings, train_grpo
from engine.problem import Problem

# Whole-word vocabulary plus added tokens that hold newlines, so that random text sometimes
# forms a fenced block with an include and the entry point (and the reward varies in a group).
WORDS = "write a kernel the for with int M N K C A B { } ( ) ; return __global__ void"
ADDED = ['\n```cuda\n#include "gemmforge_abi.h"\n', "gemmforge_hgemm", "\n```\n"]
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def tiny():
    """A 2-layer Llama (hidden 32) and a word-level tokenizer, both built here."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        [WORDS], trainers.WordLevelTrainer(special_tokens=["<unk>", "<pad>", "<s>", "</s>"])
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
    )
    tokenizer.add_tokens(ADDED)
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # favour the code tokens so that some answers hold code
        for token in ADDED:
            model.lm_head.weight[tokenizer.convert_tokens_to_ids(token)] *= 0
            model.lm_head.bias = None
        model.model.norm.weight.fill_(1.0)
    return model, tokenizer


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
