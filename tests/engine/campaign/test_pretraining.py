"""engine.campaign.pretraining and ``python -m engine pretrain-policy``: speedup tables (the
Triton family's bench) become training tasks, and the recorded cuBLASLt kernels ship beside the
policy for the seed proposer."""

from __future__ import annotations

import json
import math
from pathlib import Path

from engine import cli
from engine.campaign.pretraining import speedup_table_tasks, speedup_tables
from engine.codegen.library import library
from engine.codegen.triton import inductor_configs
from engine.problem import Layout, Problem
from engine.propose.policy import Policy, policy_families
from engine.propose.seed import load_recorded_kernels

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ROOT / "bench/results/2026-12-05-h200-run14/cublaslt/cublaslt-kernels.json"
SMALL = Problem(64, 256, 128, Layout.NN)


def speedup_table(path: Path, *, baseline: str = "cublaslt_autotune") -> dict[str, float]:
    triton = [c.name for c in inductor_configs(SMALL)][:3]
    sm80 = library("sm80", Layout.NN)[0].name
    speedups = {triton[0]: 1.06, triton[1]: 0.64, triton[2]: 1.01, sm80: 0.98, "hgemm_gone": 1.2}
    table = {
        "baseline": baseline,
        "environment": {"arch": "sm_90", "gpu_name": "NVIDIA H100 80GB HBM3"},
        "shapes": [{"problem": SMALL.key, "speedups": speedups, "triton_best": triton[0]}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table))
    return speedups


def test_a_speedup_table_becomes_one_task_a_shape_by_config_name(tmp_path):
    path = tmp_path / "run" / "triton.json"
    speedups = speedup_table(path)
    assert speedup_tables(tmp_path) == [path]
    arch, tasks, unknown = speedup_table_tasks(path, "cublaslt_autotune")
    assert (arch, len(tasks), unknown) == ("sm_90", 1, 1)  # hgemm_gone: no such config
    problem, space, rewards = tasks[0]
    assert problem == SMALL
    assert {c.FAMILY for c in space.configs} == {"triton", "sm80"}
    assert rewards == {n: math.log(s) for n, s in speedups.items() if n != "hgemm_gone"}


def test_speedups_over_another_baseline_are_not_learnt(tmp_path):
    path = tmp_path / "triton.json"
    speedup_table(path, baseline="cublas")
    assert speedup_table_tasks(path, "cublaslt_autotune")[1] == []


def test_the_command_learns_speedup_tables_and_ships_cublaslts_kernels(tmp_path, capsys):
    results = tmp_path / "results"
    speedup_table(results / "h100" / "triton.json")
    (results / "h200").mkdir()
    (results / "h200" / "cublaslt-kernels.json").write_text(KERNELS.read_text())
    out = tmp_path / "pretrained"
    args = ["pretrain-policy", "--results", str(results), "--out-dir", str(out), "--steps", "30"]
    assert cli.main(args) == 0
    policy = Policy.load(out / "sm_90.pt", policy_families("sm_90"))
    assert policy is not None
    assert policy.trained_on == [
        f"{results / 'h100' / 'triton.json'} (1 problems, 1 configs "
        "this engine does not know left out)"
    ]
    best, worst = (c.name for c in inductor_configs(SMALL)[:2])
    tasks = speedup_table_tasks(results / "h100" / "triton.json", "cublaslt_autotune")[1]
    probabilities = policy.probabilities(SMALL, tasks[0][1])
    assert probabilities[best] > probabilities[worst]
    recorded = load_recorded_kernels(out / "cublaslt_kernels.json")
    assert len(recorded) == 80
    assert "cuBLASLt's kernels of 80 problems" in capsys.readouterr().out


def test_a_table_committed_compressed_is_learnt_like_a_plain_one(tmp_path):
    import lzma

    plain = tmp_path / "plain" / "triton.json"
    speedup_table(plain)
    packed = tmp_path / "packed" / "triton.json.xz"
    packed.parent.mkdir()
    packed.write_bytes(lzma.compress(plain.read_bytes()))
    assert speedup_tables(tmp_path / "packed") == [packed]
    [(problem, _, rewards)] = speedup_table_tasks(packed, "cublaslt_autotune")[1]
    [(plain_problem, _, plain_rewards)] = speedup_table_tasks(plain, "cublaslt_autotune")[1]
    assert (problem, rewards) == (plain_problem, plain_rewards)
