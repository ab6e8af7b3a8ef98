"""engine.cli: ``python -m engine`` runs without Django settings, and a bad shape is an error
message before anything touches a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_gpu_work(monkeypatch):
    """Fails the test if a command gets as far as measuring or verifying."""
    import engine.commands.bench_command as bench_command
    import engine.timing.measure

    def forbidden(*_args, **_kwargs):
        raise AssertionError("reached GPU work")

    monkeypatch.setattr(engine.timing.measure, "measure", forbidden)
    monkeypatch.setattr(bench_command, "verify", forbidden)
    monkeypatch.setattr(bench_command, "compile_kernel_file", forbidden)


def test_python_m_engine_help_works_without_django_settings():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        [sys.executable, "-m", "engine", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for command in cli.COMMAND_MODULES:
        assert command in result.stdout


def test_every_subcommand_has_help(capsys):
    for command in cli.COMMAND_MODULES:
        with pytest.raises(SystemExit) as info:
            cli.main([command, "--help"])
        assert info.value.code == 0
        assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("shape", ["4096.0x8x8", "4_096x8x8", "８x8x8", "abc"])
def test_bench_with_an_unreadable_shape_exits_with_an_error_message(shape, no_gpu_work):
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "--shape", shape])
    message = str(info.value.code)
    assert message.startswith("error:")
    assert "MxNxK" in message
    assert info.value.code != 0


def test_bench_with_a_misaligned_shape_names_the_nearest_valid_values(no_gpu_work):
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "--shape", "64x64x64", "--shape", "64x100x64"])
    assert str(info.value.code) == (
        "error: N=100 must be a multiple of 8 so that every row starts on a 16-byte boundary; "
        "nearest valid values are 96 and 104"
    )


def test_verify_with_a_bad_shape_exits_before_compiling(tmp_path, monkeypatch):
    import engine.commands.verify_command as verify_command

    def forbidden(*_args, **_kwargs):
        raise AssertionError("reached compile")

    monkeypatch.setattr(verify_command, "compile_kernel_file", forbidden)
    kernel = tmp_path / "k.cu"
    kernel.write_text("// nothing\n")
    with pytest.raises(SystemExit) as info:
        cli.main(["verify", str(kernel), "--shape", "0x8x8"])
    assert str(info.value.code).startswith("error: M must be positive")


def test_an_unknown_layout_is_an_argparse_error(capsys, no_gpu_work):
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "--shape", "64x64x64", "--layout", "nt"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_no_subcommand_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([])
    assert info.value.code == 2
