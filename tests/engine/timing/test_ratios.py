"""engine.timing.ratios: one session per ratio, ties within the measured noise, one kernel per
shape."""

from __future__ import annotations

import pytest

from engine.timing.ratios import (
    FASTER,
    SLOWER,
    TIED,
    UNMEASURED,
    Choice,
    Session,
    ShapeBest,
    Timing,
    choose,
    headline,
    measured_spread,
    preferred,
    ratio,
)


def session(name: str, kernel: float, autotune: float, protocol: str = "device") -> Session:
    """A session on the H200, whose device-protocol spread was measured (MEASURED_SPREAD)."""
    timings = {"cublaslt_autotune": Timing(autotune)}
    return Session(name, protocol, Timing(kernel), timings, environment="NVIDIA H200")


def test_a_ratio_whose_quartile_interval_holds_one_is_a_tie():
    kernel = Timing(1.00e-4, 0.98e-4, 1.03e-4)
    baseline = Timing(1.01e-4, 0.99e-4, 1.02e-4)
    r = ratio(baseline, kernel)
    assert r.value == pytest.approx(1.01)
    assert r.low is not None
    assert r.low < 1 < (r.high or 0)
    assert r.verdict == TIED


def test_a_ratio_clear_of_the_noise_is_a_win_or_a_loss():
    assert ratio(Timing(1.2e-4, 1.19e-4, 1.21e-4), Timing(1e-4, 0.99e-4, 1.01e-4)).verdict == FASTER
    assert ratio(Timing(0.9e-4, 0.89e-4, 0.91e-4), Timing(1e-4, 0.99e-4, 1.01e-4)).verdict == SLOWER


def test_without_quartiles_or_a_measured_spread_a_ratio_has_no_verdict():
    assert ratio(Timing(5.504e-6), Timing(5.504e-6)).verdict == TIED
    r = ratio(Timing(1.0001e-4), Timing(1e-4))
    assert (r.verdict, r.noise) == (UNMEASURED, "no noise measured")  # never "faster"
    assert ratio(Timing(5.504e-6), Timing(5.536e-6)).verdict == UNMEASURED


def test_without_quartiles_the_spread_measured_on_that_gpu_decides():
    assert measured_spread("device", "NVIDIA H200") == pytest.approx(0.02)
    assert measured_spread("device", "NVIDIA H100 80GB HBM3") is None
    assert measured_spread("offline", "NVIDIA H200") is None
    on_h200 = Session("final", "device", Timing(1e-4), {"torch": Timing(1.002e-4)}, "NVIDIA H200")
    assert on_h200.ratios()["torch"].verdict == TIED  # ×1.002: inside the 2 % spread
    assert "spread 2%" in on_h200.ratios()["torch"].noise
    clear = Session("final", "device", Timing(1e-4), {"torch": Timing(1.05e-4)}, "NVIDIA H200")
    assert clear.ratios()["torch"].verdict == FASTER
    elsewhere = Session("final", "device", Timing(1e-4), {"torch": Timing(1.05e-4)}, "H100")
    assert elsewhere.ratios()["torch"].verdict == UNMEASURED
    given = Session("final", "offline", Timing(1e-4), {"torch": Timing(1.05e-4)}, spread=0.1)
    assert given.ratios()["torch"].verdict == TIED
    assert Session.from_dict(given.to_dict()) == given  # the spread survives Problem.best


def test_timings_read_numbers_and_mappings_and_refuse_missing_times():
    assert Timing.of(2e-6) == Timing(2e-6)
    assert Timing.of({"median_s": 2e-6, "p25": 1e-6, "p75": 3e-6}) == Timing(2e-6, 1e-6, 3e-6)
    assert Timing.of(None) is None
    assert Timing.of({"seconds": 0}) is None


def test_the_final_session_is_preferred_and_a_session_without_baselines_never_is():
    final = session("final", 1.0, 0.99)
    search = session("search", 1.0, 1.08)
    unpaired = Session("final", "device", Timing(1.0), {})
    assert preferred([search, final]) is final
    assert preferred([search, unpaired]) is search
    assert preferred([unpaired]) is None


def test_choose_compares_finals_with_finals_and_skips_kernels_without_a_pair():
    kernels = [
        ("a", 1, [session("search", 1.0, 1.5)]),  # best search ratio, never re-measured
        ("b", 2, [session("search", 1.0, 1.1), session("final", 1.0, 0.97)]),
        ("c", 3, [session("search", 1.0, 1.0), session("final", 1.0, 0.99)]),
        ("d", 4, [Session("search", "device", Timing(0.5), {})]),
    ]
    chosen = choose(kernels)
    assert chosen is not None
    assert (chosen.kernel, chosen.key, chosen.session.name) == ("c", 3, "final")
    assert chosen.ratios()["cublaslt_autotune"].value == pytest.approx(0.99)
    assert choose([("d", 4, [Session("search", "device", Timing(0.5), {})])]) is None


def test_the_headline_counts_verdicts_and_names_the_worst_shape_and_the_ceiling():
    bests = [
        ShapeBest("s1", 2e12, Choice("k1", session("final", 1.0, 1.2))),
        ShapeBest("s2", 2e12, Choice("k2", session("final", 2.0, 0.8))),
        ShapeBest("s3", 2e12, Choice("k3", session("final", 4.0, 4.0))),
    ]
    h = headline(bests, without=2)
    autotune = h.summary("cublaslt_autotune")
    assert autotune is not None
    assert autotune.counts == {FASTER: 1, TIED: 1, SLOWER: 1}
    assert autotune.geomean == pytest.approx((1.2 * 0.4 * 1.0) ** (1 / 3))
    assert h.worst == ("s2", pytest.approx(0.4))
    assert h.best == ("s1", "k1", pytest.approx(2.0))
    assert h.ceiling == ("s2", pytest.approx(2.5))  # the library took 0.8 s on s2
    assert h.ceiling_fraction == pytest.approx(0.8)
    assert h.to_dict()["shapes_without_ratio"] == 2


def test_a_search_outcome_keeps_the_quartiles_of_the_kernel_and_of_each_baselines_runner():
    from engine.execution.executor import outcome_from_record

    stats = {
        "k": {"median": 1.0e-4, "p25": 0.98e-4, "p75": 1.03e-4},
        "cublaslt_autotune_tn": {"median": 1.02e-4, "p25": 1.0e-4, "p75": 1.04e-4},
        "cublaslt_heuristic_tn": {"median": 1.05e-4, "p25": 1.0e-4, "p75": 1.1e-4},
    }
    record = {
        "protocols": {
            "device": {
                "seconds": {name: s["median"] for name, s in stats.items()},
                "best_baselines": {"cublaslt_autotune": {"seconds": 1.02e-4, "layout": "tn"}},
                "stats": stats,
            }
        }
    }
    timing = outcome_from_record("k", record, ["device"]).timings["device"]
    assert (timing["p25"], timing["p75"]) == (0.98e-4, 1.03e-4)
    assert timing["baseline_quartiles"] == {"cublaslt_autotune": {"p25": 1.0e-4, "p75": 1.04e-4}}
    autotune = Timing.of({"seconds": 1.02e-4, **timing["baseline_quartiles"]["cublaslt_autotune"]})
    kernel = Timing.of({"seconds": timing["seconds"], "p25": timing["p25"], "p75": timing["p75"]})
    assert ratio(autotune, kernel).verdict == TIED  # ×1.02, inside the noise
