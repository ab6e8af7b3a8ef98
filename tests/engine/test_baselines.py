"""engine.baselines.best_of_layouts: a problem's baseline time is the faster of its two layouts."""

from __future__ import annotations

from engine.baselines import BASELINES, best_of_layouts


def test_it_picks_the_faster_layout_for_each_baseline():
    seconds = {
        "torch_nn": 2.0e-4,
        "torch_tn": 1.5e-4,
        "cublas_nn": 1.4e-4,
        "cublas_tn": 1.6e-4,
        "cublaslt_heuristic_nn": 1.45e-4,
        "cublaslt_heuristic_tn": 1.44e-4,
        "cublaslt_autotune_nn": 1.41e-4,
        "cublaslt_autotune_tn": 1.42e-4,
        "my_kernel": 1.0e-4,
    }
    assert best_of_layouts(seconds) == {
        "torch": {"seconds": 1.5e-4, "layout": "tn"},
        "cublas": {"seconds": 1.4e-4, "layout": "nn"},
        "cublaslt_heuristic": {"seconds": 1.44e-4, "layout": "tn"},
        "cublaslt_autotune": {"seconds": 1.41e-4, "layout": "nn"},
    }


def test_a_baseline_measured_in_one_layout_only_uses_that_layout():
    assert best_of_layouts({"cublas_tn": 3.0, "torch_nn": 2.0}) == {
        "cublas": {"seconds": 3.0, "layout": "tn"},
        "torch": {"seconds": 2.0, "layout": "nn"},
    }


def test_a_baseline_that_was_not_measured_is_left_out():
    best = best_of_layouts({"torch_nn": 1.0, "torch_tn": 1.0})
    assert list(best) == ["torch"]
    assert best["torch"]["layout"] == "nn"  # a tie goes to the first layout


def test_it_does_not_mistake_cublaslt_times_for_cublas_times():
    best = best_of_layouts({"cublaslt_autotune_nn": 1.0, "cublas_nn": 5.0})
    assert best["cublas"]["seconds"] == 5.0
    assert best["cublaslt_autotune"]["seconds"] == 1.0


def test_candidates_are_never_baselines():
    assert best_of_layouts({"candidate": 1.0, "my_kernel_nn": 1.0}) == {}


def test_the_baselines_are_torch_cublas_and_both_cublaslt_flavours():
    assert BASELINES == ("torch", "cublas", "cublaslt_heuristic", "cublaslt_autotune")
