"""bench/longk_timeline.py without a GPU: the probe finds its anchors in every searched longk
kernel and builds, and a call's stamps are read into phases (the GPU stage `bash
bench/device/gpu_run.sh longk-timeline` runs the real one)."""

from __future__ import annotations

import subprocess

import pytest

from engine.codegen import LongKConfig
from engine.codegen.library import longk_library
from engine.compilation import compile as comp
from engine.problem import Layout
from tests.bench_scripts import load


@pytest.fixture(scope="module")
def timeline():
    return load("longk_timeline")


def test_every_searched_longk_kernel_takes_a_stamp_at_each_phase(timeline):
    for layout in (Layout.NN, Layout.TN):
        for config in longk_library(layout):
            if config.reduce != "pull" or config.groups != 1:
                continue
            source = timeline.probe_source(config.render())
            for index in range(len(timeline.PHASES)):
                assert source.count(f"probe[{2 * index}] = probe_globaltimer()") == 1, config.name


def test_push_and_send_kernels_take_every_stamp_but_the_pull_barriers(timeline):
    for reduce in ("push", "send"):
        config = LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=8, reduce=reduce)
        source = timeline.probe_source(config.render())
        stamped = {
            phase
            for index, phase in enumerate(timeline.PHASES)
            if f"probe[{2 * index}] = probe_globaltimer()" in source
        }
        assert stamped == set(timeline.PHASES) - {"parked", "reduced"}, reduce


def test_a_source_without_a_required_anchor_is_refused(timeline):
    source = LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=8).render()
    with pytest.raises(ValueError, match="anchor"):
        timeline.probe_source(source.replace("    wgmma_wait<0>();\n  }\n", ""))


def test_a_phase_some_ctas_did_not_stamp_is_passed_over(timeline):
    slots = timeline.SLOTS
    row = [0] * (slots + 1)
    for index, phase in enumerate(timeline.PHASES):
        if phase not in ("parked", "reduced"):  # a send kernel's
            row[2 * index], row[2 * index + 1] = 1000 + 100 * index, 200 * index
    summary = timeline.phase_summary([row], clock_ghz=2.0)
    assert summary["loop_done->end_us"] == pytest.approx((6 - 3) * 200 / 2e3)  # phases 3 to 6
    assert "loop_done->parked_us" not in summary
    assert summary["span_us"] == pytest.approx(0.6)


def test_phases_are_read_from_the_sm_clock_and_the_spread_from_the_global_timer(timeline):
    slots = timeline.SLOTS
    # two CTAs on SMs 3 and 7: global-timer ns and 2 GHz clock cycles at each of the seven phases
    first = [0] * (slots + 1)
    second = [0] * (slots + 1)
    timer_ns = (1000, 1200, 2200, 6200, 6400, 7000, 7400)
    cycles_at = (0, 400, 2400, 10400, 10800, 12000, 12800)
    for index, (ns, cycles) in enumerate(zip(timer_ns, cycles_at, strict=True)):
        first[2 * index], first[2 * index + 1] = ns, cycles
        second[2 * index], second[2 * index + 1] = ns + 500, cycles + 7
    first[slots], second[slots] = 3, 7
    summary = timeline.phase_summary([first, second], clock_ghz=2.0)
    assert summary["launch_spread_us"] == pytest.approx(0.5)
    assert summary["span_us"] == pytest.approx(6.9)
    assert summary["first_tile->loop_done_us"] == pytest.approx(4.0)
    assert summary["loop_done->parked_us"] == pytest.approx(0.2)
    assert summary["parked->reduced_us"] == pytest.approx(0.6)
    assert summary["reduced->end_us"] == pytest.approx(0.4)
    assert summary["sms"] == 2


@pytest.mark.nvcc
def test_the_probed_kernel_builds_for_hopper(timeline, engine_config):
    config = LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=16)
    [result] = comp.compile_many(
        [timeline.probe_source(config.render())], archs=LongKConfig.ARCHS, config=engine_config
    )
    assert result.ok, result.log[-3000:]


def test_the_default_pairs_name_valid_configs_for_their_shapes(timeline):
    from bench.longk_profile import config_of
    from engine.problem import Problem

    for pair in timeline.DEFAULT_PAIRS.split(","):
        shape, config = config_of(pair)
        assert config.is_valid(Problem.parse(shape)), pair
        assert timeline.pair_error(pair) is None


@pytest.mark.parametrize(
    ("pair", "reason"),
    [
        ("128x128/64/8/16/0", "MxNxK"),
        ("128x128x16384/64/eight/16/0", "expected SHAPE/TILE_N"),
        ("128x128x16384/64/8/4/0/0/4", "need a workspace"),
        ("128x128x16384/64/8/16/0/0/1/2", "16 splits x 2 multicast"),
    ],
)
def test_a_pair_it_cannot_time_is_refused_with_a_reason(timeline, pair, reason):
    assert reason in timeline.pair_error(pair)
    with pytest.raises(SystemExit):
        timeline.main(["--pairs", pair])


def test_the_relaxed_tail_rewrite_applies_to_every_searched_pull_kernel_and_only_there(timeline):
    for layout in (Layout.NN, Layout.TN):
        for config in longk_library(layout):
            if config.reduce != "pull" or config.groups != 1:
                continue
            source = timeline.rewritten(config.render(), "relaxed_tail")
            assert "barrier.cluster.arrive.relaxed.aligned" in source, config.name
            assert timeline.FINAL_BARRIER not in source
    push = LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=8, reduce="push")
    with pytest.raises(ValueError, match="relaxed_tail"):
        timeline.rewritten(push.render(), "relaxed_tail")


@pytest.mark.nvcc
def test_the_relaxed_tail_drops_the_final_gpu_wide_memory_barrier(timeline, engine_config):
    from tests.engine.codegen.test_longk import find_cuobjdump

    if (cuobjdump := find_cuobjdump()) is None:
        pytest.skip("no cuobjdump to read the SASS with")
    config = LongKConfig(layout=Layout.NN, tile_n=64, stages=8, splits=16)
    sources = [config.render(), timeline.rewritten(config.render(), "relaxed_tail")]
    plain, relaxed = comp.compile_many(sources, archs=LongKConfig.ARCHS, config=engine_config)
    assert plain.ok, plain.log[-3000:]
    assert relaxed.ok, relaxed.log[-3000:]
    count = {
        name: subprocess.run(
            [cuobjdump, "-sass", str(build.library)], capture_output=True, text=True
        ).stdout.count("MEMBAR.ALL.GPU")
        for name, build in (("plain", plain), ("relaxed", relaxed))
    }
    assert count == {"plain": 2, "relaxed": 1}


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--flushes", "write,clean"], "['clean'] not among"),
        (["--flushes", "read"], "--best-of or --pairs"),
    ],
)
def test_the_floor_refuses_bad_input_before_any_gpu_work(argv, complaint, capsys):
    floor = load("longk_floor")
    with pytest.raises(SystemExit):
        floor.main(argv)
    assert complaint in capsys.readouterr().err
