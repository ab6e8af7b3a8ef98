"""``python -m engine train-llm``: GRPO with LoRA on a local model, rewards from the evaluator."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.execution.executor import LocalGpuExecutor, ReplayExecutor, ReplayTable
from engine.llm.evaluate import ChainEvaluator
from engine.llm.train import TrainSettings, train_grpo
from engine.problem import Layout, Problem, ProblemError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train-llm",
        aliases=["train_llm"],  # the module's name, as engine.cli.COMMAND_MODULES lists it
        help="RL fine-tuning (GRPO + LoRA) of a local model on kernel speed",
    )
    parser.add_argument("--model", required=True, help="path or hub id of a causal LM")
    parser.add_argument("--shapes", required=True, help="comma-separated MxNxK shapes")
    parser.add_argument("--layout", default="tn", choices=[x.value for x in Layout])
    parser.add_argument("--output", type=Path, required=True, help="checkpoint folder")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--generations", type=int, default=8, help="GRPO group size")
    parser.add_argument("--prompts-per-step", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--max-completion-tokens", type=int, default=4096)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=0.0, help="KL weight")
    parser.add_argument("--save-steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu", action="store_true", help="train on the CPU")
    parser.add_argument("--replay", type=Path, action="append", help="recorded table(s)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    try:
        problems = [Problem.parse(s, args.layout) for s in args.shapes.split(",") if s.strip()]
    except ProblemError as exc:
        raise SystemExit(f"error: {exc}") from None
    if not problems:
        raise SystemExit("error: --shapes names no shape")
    executor = ReplayExecutor(ReplayTable.load(args.replay)) if args.replay else LocalGpuExecutor()
    settings = TrainSettings(
        steps=args.steps,
        num_generations=args.generations,
        prompts_per_step=args.prompts_per_step,
        learning_rate=args.lr,
        lora_r=args.lora_r,
        lora_alpha=2 * args.lora_r,
        max_completion_length=args.max_completion_tokens,
        temperature=args.temperature,
        beta=args.beta,
        save_steps=args.save_steps,
        seed=args.seed,
        use_cpu=args.cpu,
    )
    result = train_grpo(
        args.model,
        AutoTokenizer.from_pretrained(args.model),
        problems,
        ChainEvaluator(executor=executor),
        output_dir=args.output,
        settings=settings,
    )
    rewards = [e["reward"] for e in result.rewards.entries]
    print(
        json.dumps(
            {
                "checkpoint": str(result.final_checkpoint),
                "evaluations": len(rewards),
                "best_reward": max(rewards, default=None),
            }
        )
    )
    print(f"use it: BackendSpec(kind='local', model='{result.final_checkpoint}')")
    return 0
