"""RL fine-tuning of a local model: GRPO (trl.GRPOTrainer) with LoRA (peft).

Prompts are engine.llm.prompt prompts for campaign problems (with the best kernels so far when a
campaign's history is given). For each prompt the trainer samples a group of ``num_generations``
answers; :class:`KernelReward` extracts each answer's code and runs it through an
:class:`~engine.llm.evaluate.Evaluator` (static gate → compile → verify → measure, reward = log
speedup over the baseline, a fixed low reward for failures); GRPO normalises the rewards within
each group into advantages. LoRA adapters are saved under ``output_dir`` (``checkpoint-<step>``
and ``final``) with a gemmforge_llm.json naming the base model, so that any of them can be
loaded as a backend: ``TransformersBackend.load(checkpoint)`` or BackendSpec(kind="local",
model=checkpoint).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.llm.backends import CHECKPOINT_META
from engine.llm.evaluate import Evaluation, Evaluator
from engine.llm.extract import check_answer
from engine.llm.prompt import GpuFacts, Message, PromptContext, build_messages, prompt_text
from engine.problem import Problem


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 100
    num_generations: int = 8  # the GRPO group: answers sampled per prompt
    prompts_per_step: int = 1
    learning_rate: float = 1e-5
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    target_modules: Sequence[str] | str = "all-linear"
    max_completion_length: int = 4096
    temperature: float = 1.0
    beta: float = 0.0  # KL weight (0: no reference model, as recent GRPO recipes do)
    save_steps: int = 10
    seed: int = 0
    use_cpu: bool = False
    no_code_reward: float = -3.0  # an answer with no code at all

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not isinstance(self.target_modules, str):
            out["target_modules"] = list(self.target_modules)
        return out


@dataclass
class RewardLog:
    """Every evaluation the reward function made, in order (for reports and tests)."""

    entries: list[dict[str, Any]] = field(default_factory=list)


class KernelReward:
    """The GRPO reward: the evaluator chain on each completion's code (one float per answer)."""

    __name__ = "kernel_speedup"  # trl logs rewards under this name

    def __init__(
        self,
        evaluator: Evaluator,
        problems: Mapping[str, Problem],
        *,
        no_code_reward: float = -3.0,
        log: RewardLog | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.problems = dict(problems)
        self.no_code_reward = no_code_reward
        self.log = log or RewardLog()
        self._cache: dict[tuple[str, str], Evaluation] = {}
        self._lock = threading.Lock()

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any
    ) -> list[float]:
        keys = columns.get("problem") or []
        rewards = []
        for i, completion in enumerate(completions):
            text = completion if isinstance(completion, str) else _last_content(completion)
            problem = self.problems[keys[i]]
            checked = check_answer(text)
            if checked.source is None:
                entry = {"problem": problem.key, "reward": self.no_code_reward}
                entry.update(reason=checked.reason, stage="extract", name=None)
                rewards.append(self.no_code_reward)
            else:
                evaluation = self._evaluate(problem, checked.source)
                entry = {
                    "problem": problem.key,
                    "reward": evaluation.reward,
                    "reason": evaluation.reason,
                    "stage": evaluation.stage,
                    "name": evaluation.name,
                    "speedups": dict(evaluation.speedups),
                }
                rewards.append(evaluation.reward)
            self.log.entries.append(entry)
        return rewards

    def _evaluate(self, problem: Problem, source: str) -> Evaluation:
        key = (problem.key, source)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        evaluation = self.evaluator.evaluate(problem, source)
        with self._lock:
            self._cache[key] = evaluation
        return evaluation


def render_prompt(tokenizer: Any, messages: Sequence[Message]) -> str:
    """The prompt text the model sees (its chat template when it has one)."""
    if getattr(tokenizer, "chat_template", None):
        return str(
            tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=True
            )
        )
    return prompt_text(messages)


def prompt_dataset(
    tokenizer: Any,
    problems: Sequence[Problem],
    *,
    gpu: GpuFacts,
    contexts: Mapping[str, PromptContext] | None = None,
) -> Any:
    """A datasets.Dataset with ``prompt`` (text) and ``problem`` (key) columns."""
    from datasets import Dataset

    rows = []
    for problem in problems:
        context = (contexts or {}).get(problem.key) or PromptContext(problem=problem, gpu=gpu)
        rows.append(
            {"prompt": render_prompt(tokenizer, build_messages(context)), "problem": problem.key}
        )
    return Dataset.from_list(rows)


@dataclass
class TrainResult:
    output_dir: Path
    final_checkpoint: Path
    log_history: list[dict[str, Any]]
    rewards: RewardLog


def train_grpo(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    evaluator: Evaluator,
    *,
    output_dir: str | Path,
    settings: TrainSettings = TrainSettings(),
    gpu: GpuFacts | None = None,
    base_model: str | None = None,
    contexts: Mapping[str, PromptContext] | None = None,
) -> TrainResult:
    """GRPO with LoRA on ``model`` (a PreTrainedModel or a path/hub id); returns where the
    adapters are. ``base_model`` is what a checkpoint names as its base (default: the model's
    own name_or_path)."""
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(model, str | Path):
        from transformers import AutoModelForCausalLM

        base_model = base_model or str(model)
        model = AutoModelForCausalLM.from_pretrained(str(model))
    base_model = base_model or getattr(model, "name_or_path", "") or ""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    gpu = gpu or GpuFacts.h200()
    rewards = RewardLog()
    reward = KernelReward(
        evaluator,
        {p.key: p for p in problems},
        no_code_reward=settings.no_code_reward,
        log=rewards,
    )
    dataset = prompt_dataset(tokenizer, problems, gpu=gpu, contexts=contexts)
    meta = {
        "base_model": base_model,
        "problems": [p.key for p in problems],
        "settings": settings.to_dict(),
    }

    class SaveMeta(TrainerCallback):  # type: ignore[misc]
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = output_dir / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                (folder / CHECKPOINT_META).write_text(json.dumps(meta, indent=1))

    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=settings.steps,
        num_generations=settings.num_generations,
        per_device_train_batch_size=settings.num_generations * settings.prompts_per_step,
        learning_rate=settings.learning_rate,
        max_completion_length=settings.max_completion_length,
        temperature=settings.temperature,
        beta=settings.beta,
        save_strategy="steps",
        save_steps=settings.save_steps,
        logging_steps=1,
        report_to=[],
        seed=settings.seed,
        use_cpu=settings.use_cpu,
        dataloader_num_workers=0,
        **({"bf16": False} if settings.use_cpu else {}),
    )
    lora = LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=settings.target_modules
        if isinstance(settings.target_modules, str)
        else list(settings.target_modules),
        task_type="CAUSAL_LM",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[SaveMeta()],
    )
    trainer.train()
    final = output_dir / "final"
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    (final / CHECKPOINT_META).write_text(json.dumps(meta, indent=1))
    (output_dir / "rewards.json").write_text(json.dumps(rewards.entries, indent=1, default=str))
    return TrainResult(output_dir, final, list(trainer.state.log_history), rewards)


def _last_content(completion: Any) -> str:
    """A conversational completion ([{role, content}, ...]) as text."""
    if isinstance(completion, list) and completion:
        return str(completion[-1].get("content", ""))
    return str(completion)
