"""``python -m engine``: the command-line interface. Each subcommand lives in engine/commands/."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommands: engine/commands/<name>_command.py defines register(subparsers), sets args.func.
COMMAND_MODULES: tuple[str, ...] = (
    "bench",
    "verify",
    "prebuild",
    "optimize",
    "replay",
    "pretrain_policy",
    "bundle",
    "train_llm",
    "report",
    "floor",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine",
        description="gemmforge: find HGEMM kernels faster than NVIDIA's libraries.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"engine.commands.{name}_command").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
