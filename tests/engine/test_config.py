"""engine.config: ENGINE_* variables read once, as typed values, and nowhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from engine import config
from engine.config import EngineConfig, SandboxNetwork, VerifyBusyStream, VerifyWarm

ROOT = Path(__file__).resolve().parents[2]
VARIABLE_NAME = re.compile(r"ENGINE_[A-Z0-9_]+")
VARIABLE_CONSTANTS = {name for name in vars(config) if name.endswith("_VARIABLE")}


@pytest.fixture
def clean_env(monkeypatch):
    for name in VARIABLE_CONSTANTS:
        monkeypatch.delenv(getattr(config, name), raising=False)
    return monkeypatch


def test_the_defaults(clean_env):
    loaded = config.load()
    assert loaded.verify_fork_server is True
    assert loaded.verify_mps is False
    assert loaded.heat_while_verifying is False
    assert loaded.verify_warm is VerifyWarm.OFF
    assert loaded.verify_busy_stream is VerifyBusyStream.GATE
    assert loaded.sandbox_network is SandboxNetwork.AUTO
    assert (loaded.cutlass_include, loaded.cublas_home, loaded.compute_sanitizer) == (None,) * 3


@pytest.mark.parametrize("value", ["on", "ON", "1", "true", "True", "yes", " on "])
def test_it_reads_on_as_true(clean_env, value):
    clean_env.setenv("ENGINE_VERIFY_MPS", value)
    clean_env.setenv("ENGINE_HEAT_WHILE_VERIFYING", value)
    loaded = config.load()
    assert loaded.verify_mps is True
    assert loaded.heat_while_verifying is True


@pytest.mark.parametrize("value", ["off", "Off", "0", "false", "no"])
def test_it_reads_off_as_false(clean_env, value):
    clean_env.setenv("ENGINE_VERIFY_FORK_SERVER", value)
    assert config.load().verify_fork_server is False


def test_an_empty_switch_keeps_its_default(clean_env):
    clean_env.setenv("ENGINE_VERIFY_FORK_SERVER", "")
    assert config.load().verify_fork_server is True


def test_it_rejects_an_unknown_switch_value_naming_the_variable(clean_env):
    clean_env.setenv("ENGINE_VERIFY_MPS", "maybe")
    with pytest.raises(ValueError, match=r"ENGINE_VERIFY_MPS must be one of on/off, .*'maybe'"):
        config.load()


def test_multi_valued_settings_are_enums_equal_to_their_strings(clean_env):
    clean_env.setenv("ENGINE_VERIFY_WARM", "kernels")
    clean_env.setenv("ENGINE_VERIFY_BUSY_STREAM", "sleep")
    clean_env.setenv("ENGINE_SANDBOX_NETWORK", "off")
    loaded = config.load()
    assert loaded.verify_warm is VerifyWarm.KERNELS
    assert loaded.verify_warm == "kernels"
    assert loaded.verify_busy_stream is VerifyBusyStream.SLEEP
    assert loaded.sandbox_network is SandboxNetwork.OFF
    assert f"{loaded.sandbox_network}" == "off"


def test_it_rejects_an_unknown_choice_naming_the_variable_and_the_choices(clean_env):
    clean_env.setenv("ENGINE_VERIFY_WARM", "hot")
    with pytest.raises(ValueError, match=r"ENGINE_VERIFY_WARM must be one of off, on, kernels"):
        config.load()


def test_tool_paths_are_paths(clean_env, tmp_path):
    clean_env.setenv("ENGINE_CUTLASS_INCLUDE", str(tmp_path / "cutlass"))
    clean_env.setenv("ENGINE_CUBLAS_HOME", str(tmp_path / "cublas"))
    clean_env.setenv("ENGINE_COMPUTE_SANITIZER", "~/bin/compute-sanitizer")
    loaded = EngineConfig()
    assert loaded.cutlass_include == tmp_path / "cutlass"
    assert loaded.cublas_home == tmp_path / "cublas"
    assert loaded.compute_sanitizer == Path("~/bin/compute-sanitizer").expanduser()


def test_a_switch_is_written_for_children_as_the_child_reads_it(clean_env):
    for on in (True, False):
        clean_env.setenv("ENGINE_VERIFY_MPS", config.switch_value(on))
        assert config.load().verify_mps is on


def test_the_mps_variables_are_read_at_call_time(clean_env):
    assert config.verify_mps_pipe() is None
    clean_env.setenv("ENGINE_VERIFY_MPS_PIPE", "/run/mps/pipe")
    clean_env.setenv("ENGINE_VERIFY_MPS_UNAVAILABLE", "")
    assert config.verify_mps_pipe() == "/run/mps/pipe"
    assert config.verify_mps_unavailable() is None


# -- nothing else reads ENGINE_* ---------------------------------------------------------------
def _key_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_environ(node: ast.expr) -> bool:
    return _key_name(node) == "environ"


def environment_reads(source: str, label: str) -> list[str]:
    """Where ``source`` names an ENGINE_* variable in a string of its own, or reads the
    environment under one of engine.config's variable-name constants."""
    found = []
    for node in ast.walk(ast.parse(source, filename=label)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if VARIABLE_NAME.fullmatch(node.value):
                found.append(f"{label}:{node.lineno} names {node.value}")
            continue
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice if _is_environ(node.value) else None
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            reads_environ = node.func.attr == "get" and _is_environ(node.func.value)
            key = node.args[0] if reads_environ or node.func.attr == "getenv" else None
        if key is not None and _key_name(key) in VARIABLE_CONSTANTS:
            found.append(f"{label}:{node.lineno} reads {_key_name(key)}")
    return sorted(found)


def test_no_module_but_engine_config_reads_an_engine_variable():
    modules = [
        module
        for folder in ("engine", "webapp", "bench")
        for module in sorted((ROOT / folder).rglob("*.py"))
        if module != ROOT / "engine" / "config.py"
    ]
    assert len(modules) > 50
    hits = [
        hit
        for module in modules
        for hit in environment_reads(module.read_text(), str(module.relative_to(ROOT)))
    ]
    assert hits == []


def test_the_guard_catches_engine_variables_read_elsewhere():
    source = (
        "import os\n"
        "a = os.environ.get('ENGINE_NVCC', 'nvcc')\n"
        "b = os.environ[config.CUBLAS_HOME_VARIABLE]\n"
        "c = os.getenv(VERIFY_MPS_PIPE_VARIABLE)\n"
        "env[config.CACHE_DIR_VARIABLE] = '/cache'\n"  # written for a child: fine
        "d = os.environ.get('PATH')\n"
    )
    assert environment_reads(source, "bad.py") == [
        "bad.py:2 names ENGINE_NVCC",
        "bad.py:3 reads CUBLAS_HOME_VARIABLE",
        "bad.py:4 reads VERIFY_MPS_PIPE_VARIABLE",
    ]
