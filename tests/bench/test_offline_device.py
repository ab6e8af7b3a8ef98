"""bench/offline_device.py's CPU parts: its arguments, the kernels it picks, and the speedups,
host times and table it makes from the protocols' results (made-up records stand in for the
GPU's)."""

from __future__ import annotations

import json

import pytest

from tests.bench_scripts import load

offline_device = load("offline_device")
BASELINE = offline_device.BASELINE
SM90_LARGE, SM90_SMALL = offline_device.KERNELS["sm90"]
SM80_LARGE, SM80_SPLIT = offline_device.KERNELS["sm80"]


def stats(median: float, mean: float | None = None) -> dict[str, float]:
    return {"median": median, "mean": median if mean is None else mean}


def offline_run(kernel_s: float, lt_s: float, kernel_launch: float, lt_launch: float) -> dict:
    return {
        "stats": {"sm90": stats(kernel_s, kernel_s + 2e-6), BASELINE: stats(lt_s, lt_s + 1e-6)},
        "event_s": {"sm90": kernel_s - 4e-6, BASELINE: lt_s - 4e-6},
        "launch_host_s": {"sm90": kernel_launch, BASELINE: lt_launch},
        "rejections": {},
    }


def raw_condition(*, reinit_s: float) -> dict:
    """A condition in which the sm90 kernel's launch costs ``reinit_s`` more than cuBLASLt's."""
    return {
        "device": {"stats": {"sm90": stats(55e-6), BASELINE: stats(54e-6)}, "rejections": {}},
        "offline": [
            offline_run(70e-6 + reinit_s, 69e-6, 5e-6 + reinit_s, 5e-6),
            offline_run(71e-6 + reinit_s, 69e-6, 5e-6 + reinit_s, 5e-6),
        ],
        "host_overhead": {
            "rotating": {"sm90": 5e-6 + reinit_s, BASELINE: 5e-6},
            "same_buffers": {"sm90": 5e-6, BASELINE: 5e-6},
        },
        "power": {"device": {"sm_clock_mhz": {"mean": 1755.0}}, "offline": {}},
    }


def shape_record(problem: str = "2048x2048x4096_nn") -> dict:
    return {
        "problem": problem,
        "kernels": {"sm90": SM90_LARGE},
        "conditions": {
            "checks": offline_device.condition_summary(raw_condition(reinit_s=8e-6), ["sm90"]),
            "no_checks": offline_device.condition_summary(raw_condition(reinit_s=0.0), ["sm90"]),
        },
    }


def test_the_default_shapes_include_the_mid_size_and_long_k_ones():
    args = offline_device.parse_args([])
    keys = [p.key for p in args.problems]
    assert "2048x2048x4096_nn" in keys  # M·N·K = 2^34
    assert "512x256x8192_nn" in keys
    assert args.offline_iterations == 200


def test_it_rejects_too_few_offline_iterations_and_an_empty_shape_list(capsys):
    with pytest.raises(SystemExit):
        offline_device.parse_args(["--offline-iterations", "10"])
    with pytest.raises(SystemExit):
        offline_device.parse_args(["--shapes", " , "])
    assert "at least 20" in capsys.readouterr().err


def test_it_takes_the_large_tiles_where_they_fill_the_gpu_and_the_small_ones_elsewhere():
    valid = dict.fromkeys([SM90_LARGE, SM90_SMALL, SM80_LARGE, SM80_SPLIT], True)
    args = offline_device.parse_args(["--shapes", "2048x2048x4096,512x256x8192"])
    mid, long_k = args.problems
    assert offline_device.kernel_names(mid, valid) == {"sm90": SM90_LARGE, "sm80": SM80_LARGE}
    assert offline_device.kernel_names(long_k, valid) == {"sm90": SM90_SMALL, "sm80": SM80_SPLIT}
    only = {SM90_LARGE: True}
    assert offline_device.kernel_names(long_k, only) == {"sm90": SM90_LARGE}


def test_a_costlier_launch_lowers_the_offline_speedup_and_not_the_device_one():
    checks = shape_record()["conditions"]["checks"]["sm90"]
    plain = shape_record()["conditions"]["no_checks"]["sm90"]
    assert checks["device"] == plain["device"] == pytest.approx(54 / 55)
    assert checks["offline_median"][0] == pytest.approx(69 / 78)
    assert plain["offline_median"][0] == pytest.approx(69 / 70)
    assert checks["offline_mean"][0] == pytest.approx(70 / 80)  # the means, 1 and 2 µs above
    assert checks["kernel_launch_offline_us"] == pytest.approx(13.0)
    assert checks["cublaslt_launch_offline_us"] == pytest.approx(5.0)
    assert checks["kernel_probe_rotating_us"] == pytest.approx(13.0)
    assert checks["kernel_probe_same_us"] == pytest.approx(5.0)
    assert checks["rejected"] == []


def test_the_table_has_a_row_per_kernel_and_condition_and_marks_rejections():
    record = shape_record()
    record["conditions"]["checks"]["sm90"]["rejected"] = ["sm90"]
    text = offline_device.table([record])
    rows = [line for line in text.splitlines() if line.startswith("| 2048x2048x4096_nn")]
    assert len(rows) == 2
    assert "REJECTED sm90" in rows[0]
    assert "| on |" in rows[0]
    assert "| off |" in rows[1]
    assert "REJECTED" not in rows[1]
    assert "13.0 / 5.0" in rows[0]  # launch µs, kernel / cuBLASLt
    assert "1755 / –" in rows[0]  # SM clock: NVML read in the device run only
    header, rule = text.splitlines()[:2]
    assert header.count("|") == rule.count("|")


def test_geomeans_are_per_family_and_condition():
    geo = offline_device.geomeans([shape_record(), shape_record("1024x1024x1024_nn")])
    assert geo["sm90_checks"]["device"] == pytest.approx(54 / 55)
    assert geo["sm90_checks"]["offline"] == pytest.approx(70 / 80)
    assert geo["sm80_checks"] == {"device": None, "offline": None}


def test_a_run_writes_the_json_and_the_table_and_alternates_the_order(tmp_path, monkeypatch):
    """main() with the GPU parts replaced: the kernels, the shim and each condition's timing."""
    import engine.gpu.environment as environment
    import engine.timing.measure as measure

    class Shim:
        cublaslt_version = 130100

    class Environment:
        def to_dict(self) -> dict:
            return {"gpu_name": "NVIDIA H100 80GB HBM3"}

    measured = []

    def fake_condition(problem, kernels, libraries, shim, *, checks, args, cache):
        measured.append((problem.key, checks))
        return raw_condition(reinit_s=8e-6 if checks else 0.0)

    chosen = {"2048x2048x4096_nn": {"sm90": SM90_LARGE}, "512x256x8192_nn": {"sm90": SM90_SMALL}}
    libraries = {SM90_LARGE: tmp_path / "a.so", SM90_SMALL: tmp_path / "b.so"}
    monkeypatch.setattr(offline_device, "build_kernels", lambda problems: (chosen, libraries))
    monkeypatch.setattr(offline_device, "measure_condition", fake_condition)
    monkeypatch.setattr(measure, "load_shim", lambda config: Shim())
    monkeypatch.setattr(environment, "collect", lambda cublaslt_version: Environment())
    monkeypatch.setattr(offline_device, "descriptor_costs", lambda: {"encode_s": 1e-6})
    shapes = "2048x2048x4096,512x256x8192"
    assert offline_device.main(["--shapes", shapes, "--out", str(tmp_path)]) == 0
    assert measured == [
        ("2048x2048x4096_nn", True),
        ("2048x2048x4096_nn", False),
        ("512x256x8192_nn", False),
        ("512x256x8192_nn", True),
    ]
    out = json.loads((tmp_path / "offline_device.json").read_text())
    assert [s["problem"] for s in out["shapes"]] == ["2048x2048x4096_nn", "512x256x8192_nn"]
    assert out["geomeans"]["sm90_no_checks"]["offline"] == pytest.approx(70 / 72)  # means
    assert out["skipped"] == []
    assert out["tma_descriptor"] == {"encode_s": 1e-6}
    table = (tmp_path / "offline_device.txt").read_text()
    assert table.count("| sm90 `") == 4


class FakeDriver:
    """libcuda's two tensor-map calls: each returns ``status`` and keeps what it was given."""

    def __init__(self, status: int = 0) -> None:
        self.status = status
        self.encoded: list[tuple] = []
        self.replaced = 0

    def cuTensorMapEncodeTiled(self, *args) -> int:
        self.encoded.append(args)
        return self.status

    def cuTensorMapReplaceAddress(self, descriptor, address) -> int:
        self.replaced += 1
        return 0


def test_the_tma_descriptor_costs_time_each_call_on_an_aligned_descriptor():
    driver = FakeDriver()
    costs = offline_device.tma_descriptor_costs(driver, 0x7F0000000000, 4096, 2048, calls=10)
    assert costs["encode_s"] >= 0
    assert costs["replace_s"] >= 0
    assert len(driver.encoded) == driver.replaced == 11  # one to check it works, then 10 timed
    descriptor, dtype, rank, address, dims, strides, box = driver.encoded[0][:7]
    assert descriptor.value % 64 == 0
    assert (dtype.value, rank.value, address.value) == (6, 2, 0x7F0000000000)
    assert list(dims) == [2048, 4096]  # the contiguous dimension first
    assert list(strides) == [2048 * 2]
    assert list(box) == [64, 128]


def test_a_failing_tma_call_is_recorded_not_raised():
    costs = offline_device.tma_descriptor_costs(FakeDriver(status=1), 0x1000, 64, 64, calls=5)
    assert costs["encode_s"] is None
    assert costs["errors"] == {"encode_s": "CUresult 1"}
    assert costs["replace_s"] >= 0
