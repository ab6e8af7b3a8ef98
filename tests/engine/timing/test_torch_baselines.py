"""engine.timing.torch_baselines: Inductor max-autotune and TunableOp as baselines, each tuned in
the measuring process with its pick and tuning time recorded. CPU tests use doubles for Inductor's
choices and torch.cuda.tunable; the GPU tests compile and tune for real."""

from __future__ import annotations

import pytest
import torch

from engine.problem import Layout, Problem
from engine.timing import torch_baselines
from engine.timing.protocols import Operands

PROBLEM = Problem(64, 32, 16, Layout.NN)


def cpu_operands(problem: Problem = PROBLEM) -> Operands:
    b = torch.randn(problem.k, problem.n)
    return Operands(
        a=torch.randn(problem.m, problem.k),
        b_nn=b,
        b_tn=b.t().contiguous(),
        c=torch.full((problem.m, problem.n), float("nan")),
    )


class Choice:
    """An Inductor ChoiceCaller as the feedback saver hands it over."""

    def __init__(self, name, info, description=""):
        self.name = name
        self._info = info
        self.description = description

    def info_dict(self):
        return self._info


TRITON_INFO = {
    "backend": "Triton",
    "tile_shape": "(64, 32, 32)",
    "num_stages": 5,
    "num_warps": 4,
    "GROUP_M": 8,
}


def test_each_shape_gets_a_matmul_with_a_code_object_of_its_own():
    """Dynamo keys its compiled entries on the code object: one per shape and layout, as a
    user compiling one matmul has, not a growing list of guarded entries."""
    nn = torch_baselines.matmul_function(PROBLEM, Layout.NN)
    other = torch_baselines.matmul_function(Problem(128, 32, 16, Layout.NN), Layout.NN)
    tn = torch_baselines.matmul_function(PROBLEM, Layout.TN)
    assert len({id(nn.__code__), id(other.__code__), id(tn.__code__)}) == 3
    assert nn.__code__.co_name == "_mm_nn_64x32x16"
    ops = cpu_operands()
    torch.testing.assert_close(nn(ops.a, ops.b_nn), ops.a @ ops.b_nn)
    torch.testing.assert_close(tn(ops.a, ops.b_tn), ops.a @ ops.b_nn)


def test_the_pick_is_the_fastest_finite_choice_inductor_timed():
    timings = {
        Choice("mm", {"backend": "extern", "kernel_call_name": "extern_kernels.mm"}): 0.0071,
        Choice("triton_mm_3", TRITON_INFO, "BLOCK_M=64, BLOCK_N=32"): 0.0062,
        Choice("triton_mm_9", {"backend": "Triton"}): float("inf"),  # failed to compile
    }
    pick, table = torch_baselines.pick_of(timings)
    assert pick["name"] == "triton_mm_3"
    assert pick["backend"] == "triton"
    assert pick["info"]["num_stages"] == 5
    assert pick["ms"] == pytest.approx(0.0062)
    assert set(table) == {"mm", "triton_mm_3", "triton_mm_9"}


def test_cublas_wins_are_named_aten():
    timings = {
        Choice("mm", {"backend": "extern", "kernel_call_name": "extern_kernels.mm"}): 0.05,
        Choice("triton_mm_1", TRITON_INFO): 0.06,
    }
    pick, _ = torch_baselines.pick_of(timings)
    assert pick["backend"] == "aten"


def test_no_finite_timing_leaves_no_pick():
    pick, table = torch_baselines.pick_of({Choice("triton_mm_1", TRITON_INFO): float("nan")})
    assert pick is None
    assert list(table) == ["triton_mm_1"]


def test_the_generated_code_tells_a_cublas_call_from_a_triton_kernel():
    aten = "buf0 = empty_strided_cuda((64, 32), (32, 1), torch.float16)\n" + (
        "extern_kernels.mm(arg0_1, arg1_1, out=buf0)\n"
    )
    triton = (
        "triton_tem_fused_mm_0 = async_compile.triton('triton_tem_fused_mm_0', '''\n...\n''')\n"
        "triton_tem_fused_mm_0.run(arg0_1, arg1_1, buf0, grid=...)\n"
    )
    assert torch_baselines.what_runs([aten]) == ("aten", [])
    assert torch_baselines.what_runs([triton]) == ("triton", ["triton_tem_fused_mm_0"])
    assert torch_baselines.what_runs([]) == (None, [])


def test_a_returning_runner_hands_its_result_to_the_operands_as_c():
    ops = cpu_operands()
    runner = torch_baselines.returning_runner(
        "inductor_max_autotune_nn", "inductor_max_autotune", Layout.NN, torch.mm, {}
    )
    assert runner.launch(ops, 0) == 0
    torch.testing.assert_close(ops.c, ops.a @ ops.b_nn)


def test_a_returning_runner_with_a_wrong_result_shape_reports_an_error_status():
    ops = cpu_operands()
    c = ops.c
    runner = torch_baselines.returning_runner(
        "x_nn", "x", Layout.NN, lambda a, b: (a @ b)[:, :-1], {}
    )
    assert runner.launch(ops, 0) == torch_baselines.RUNNER_ERROR
    assert ops.c is c


def test_the_inductor_runner_records_the_tuning_and_the_pick():
    def fake_compile(problem, layout, a, b):
        tuning = torch_baselines.InductorTuning(
            seconds=4.2,
            pick={"name": "triton_mm_3", "backend": "triton", "info": TRITON_INFO, "ms": 0.006},
            choices={"mm": 0.007, "triton_mm_3": 0.006},
            runs="triton",
            kernels=["triton_tem_fused_mm_0"],
        )
        return torch_baselines.matmul_function(problem, layout), tuning

    ops = cpu_operands()
    runner, report = torch_baselines.inductor_runner(PROBLEM, Layout.TN, ops, compile=fake_compile)
    assert runner.name == "inductor_max_autotune_tn"
    assert runner.kind == "inductor_max_autotune"
    assert report["tuning_seconds"] == 4.2
    assert report["runs"] == "triton"
    assert report["pick"]["name"] == runner.info["pick"]["name"] == "triton_mm_3"
    assert runner.launch(ops, 0) == 0
    torch.testing.assert_close(ops.c, ops.a @ ops.b_nn)


class FakeTunable:
    """torch.cuda.tunable's switches and its in-memory results."""

    def __init__(self):
        self.enabled = False
        self.tuning = False
        self.calls: list[str] = []
        self.filename = None
        self.write_on_exit = True
        self.rows = [("GemmTunableOp_Half_NN", "nn_8_8_8", "Default", "0.004")]

    def set_filename(self, name):
        self.filename = name

    def write_file_on_exit(self, value):
        self.write_on_exit = value

    def enable(self, value):
        self.enabled = value
        self.calls.append(f"enable={value}")

    def tuning_enable(self, value):
        self.tuning = value
        self.calls.append(f"tuning={value}")

    def get_results(self):
        return list(self.rows)

    def get_max_tuning_duration(self):
        return 30

    def get_max_tuning_iterations(self):
        return 100


def test_tunableop_reads_no_results_file_and_writes_none():
    from pathlib import Path

    fake = FakeTunable()
    torch_baselines.TunableOp(fake, sync=lambda: None)
    assert fake.write_on_exit is False
    assert not Path(fake.filename % 0).exists()


def test_tunableop_reports_only_what_it_tuned_for_this_shape():
    fake = FakeTunable()
    switch = torch_baselines.TunableOp(fake, sync=lambda: None)

    def tuned_call():
        assert fake.enabled
        assert fake.tuning
        fake.rows.append(("GemmTunableOp_Half_TN", "tn_32_64_16", "Gemm_Cublaslt_7", "0.0031"))

    report = switch.tune(tuned_call)
    assert [r["kernel"] for r in report["results"]] == ["Gemm_Cublaslt_7"]
    assert report["results"][0]["ms"] == pytest.approx(0.0031)
    assert report["settings"] == {
        "max_tuning_duration_ms": 30,
        "max_tuning_iterations": 100,
        "torch_version": torch.__version__,
    }
    assert report["tuning_seconds"] >= 0
    assert not fake.enabled
    assert not fake.tuning


def test_tunableop_is_on_only_during_its_runners_calls():
    fake = FakeTunable()
    switch = torch_baselines.TunableOp(fake, sync=lambda: None)
    ops = cpu_operands()
    runner, _report = torch_baselines.tunableop_runner(PROBLEM, Layout.TN, ops, switch=switch)
    assert runner.name == "tunableop_tn"
    fake.calls.clear()
    assert runner.launch(ops, 0) == 0
    assert fake.calls == ["enable=True", "enable=False"]  # no tuning while timed
    torch.testing.assert_close(ops.c, ops.a @ ops.b_nn)


def test_torch_tuned_runners_come_in_every_layout_with_their_reports():
    made = []

    def factory(name):
        def make(problem, layout, ops):
            made.append((name, layout.value))
            runner = torch_baselines.returning_runner(
                f"{name}_{layout.value}", name, layout, torch.mm, {}
            )
            return runner, {"tuning_seconds": 1.0}

        return make

    factories = {n: factory(n) for n in ("inductor_max_autotune", "tunableop")}
    runners, reports = torch_baselines.torch_tuned_runners(
        PROBLEM, cpu_operands(), ["tunableop"], [Layout.NN, Layout.TN], factories=factories
    )
    assert [r.name for r in runners] == ["tunableop_nn", "tunableop_tn"]
    assert set(reports) == {"tunableop_nn", "tunableop_tn"}
    assert made == [("tunableop", "nn"), ("tunableop", "tn")]
    with pytest.raises(ValueError, match="unknown torch baselines"):
        torch_baselines.torch_tuned_runners(PROBLEM, cpu_operands(), ["xla"], [Layout.NN])


def test_the_finals_keep_each_torch_baselines_pick_and_tuning_time_and_the_power():
    from engine.execution.final import final_summary

    device = {
        "statistic": "median",
        "seconds": {},
        "best_baselines": {},
        "speedups": {},
        "rejected_while_timed": [],
        "power": {"samples": 40, "sm_clock_mhz": {"mean": 1755.0}},
    }
    record = {
        "protocols": {"device": device},
        "environment": {"gpu_name": "H200"},
        "autotune": {
            "cublaslt_autotune_nn": {"algo": 3},
            "inductor_max_autotune_nn": {
                "tuning_seconds": 6.0,
                "pick": {"name": "mm"},
                "runs": "aten",
                "choices": {"mm": 0.1},
            },
            "tunableop_nn": {"tuning_seconds": 0.2, "results": []},
        },
    }
    summary = final_summary(record)
    assert summary["protocols"]["device"]["power"]["sm_clock_mhz"]["mean"] == 1755.0
    tuning = summary["torch_baselines"]
    assert tuning == {
        "inductor_max_autotune_nn": {"tuning_seconds": 6.0, "pick": {"name": "mm"}, "runs": "aten"},
        "tunableop_nn": {"tuning_seconds": 0.2, "results": []},
    }


def test_engine_bench_prints_what_each_torch_baseline_chose():
    from engine.timing.tables import tuning_lines

    lines = tuning_lines(
        {
            "cublaslt_autotune_nn": {"algo": 1},
            "inductor_max_autotune_nn": {
                "tuning_seconds": 4.0,
                "pick": {"name": "triton_mm_3", "backend": "triton", "info": TRITON_INFO},
                "runs": "triton",
                "choices": {"mm": 1.0, "triton_mm_3": 0.5},
            },
            "tunableop_tn": {
                "tuning_seconds": 0.25,
                "results": [{"kernel": "Gemm_Cublaslt_7"}],
            },
        }
    )
    assert len(lines) == 2
    assert lines[0].startswith(
        "  inductor_max_autotune_nn: tuned 4.00 s, ran triton triton_mm_3 "
        "(tile_shape=(64, 32, 32), num_stages=5, num_warps=4, GROUP_M=8)"
    )
    assert lines[0].endswith("; 2 choices timed")
    assert lines[1] == "  tunableop_tn: tuned 0.25 s, ran Gemm_Cublaslt_7"


def test_engine_bench_rejects_an_unknown_torch_baseline():
    from engine.commands.common import torch_baselines as parse

    assert parse("inductor_max_autotune, tunableop") == ("inductor_max_autotune", "tunableop")
    assert parse("") == ()
    with pytest.raises(SystemExit):
        parse("xla")


# -- on the GPU: compiled and tuned for real, timed like any baseline --------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("layout", [Layout.NN, Layout.TN])
def test_inductor_and_tunableop_compute_the_product_and_say_what_they_picked(layout):
    from engine.timing.baselines import best_of_layouts
    from engine.timing.protocols import Bench

    problem = Problem(256, 256, 256, layout)
    bench = Bench(problem, seed=1)
    runners, reports = torch_baselines.torch_tuned_runners(
        problem,
        bench.operand_sets[0],
        ["inductor_max_autotune", "tunableop"],
        [layout],
        stream=bench.stream,
    )
    inductor = reports[f"inductor_max_autotune_{layout.value}"]
    assert inductor["tuning_seconds"] > 0
    assert inductor["runs"] in ("aten", "triton")
    assert inductor["pick"] is not None
    assert len(inductor["choices"]) > 1
    tunable = reports[f"tunableop_{layout.value}"]
    assert tunable["results"], "TunableOp tuned nothing for a shape it had not seen"
    result = bench.device(runners, min_reps=5, max_reps=50, max_seconds=2, min_seconds=0.1)
    # checked while timed at the verification tolerance (engine.verify.timed_checks)
    assert result.extra["timed_checks"]["checked"], result.extra["timed_checks"]
    assert result.extra["timed_checks"]["baseline_failures"] == {}
    best = best_of_layouts({n: s.median for n, s in result.stats.items()})
    assert set(best) == {"inductor_max_autotune", "tunableop"}
    for protocol in (bench.offline(runners, iterations=3), bench.graph(runners, replays=2)):
        assert set(protocol.stats) == {r.name for r in runners}
    assert not torch.cuda.tunable.is_enabled()  # torch.matmul stays untuned


def test_a_campaign_cannot_reward_against_a_baseline_its_gpu_steps_do_not_time():
    from engine.campaign.loop import CampaignSettings

    with pytest.raises(ValueError, match="unknown baseline 'inductor_max_autotune'"):
        CampaignSettings(budget=4, baseline="inductor_max_autotune")


@pytest.mark.gpu
def test_inductors_host_work_stays_out_of_its_device_time():
    """Its guards and wrapper outlast the L2 flush on a 6 µs shape: on the H100 (2026-12-07)
    its device-protocol samples were p25 12 µs, p75 141 µs before the stream was held for them.
    Its kernel is a Triton mm of about torch.matmul's time; the held interval shows it."""
    from engine.timing.baselines import torch_runner
    from engine.timing.protocols import Bench

    problem = Problem(1024, 128, 256, Layout.NN)
    bench = Bench(problem, seed=2)
    runners, _ = torch_baselines.torch_tuned_runners(
        problem, bench.operand_sets[0], ["inductor_max_autotune"], [Layout.NN], stream=bench.stream
    )
    runners.append(torch_runner(problem, Layout.NN))
    result = bench.device(runners, min_reps=20, max_reps=400, max_seconds=5, min_seconds=0.5)
    inductor, matmul = result.stats["inductor_max_autotune_nn"], result.stats["torch_nn"]
    assert inductor.median < 2 * matmul.median, (inductor, matmul)
    assert inductor.p75 < 1.5 * inductor.p25, inductor  # no idle gaps: one mode, not two
