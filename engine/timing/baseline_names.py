"""The baselines' names and labels, without torch: the web app and the report import them.

The first four are NVIDIA's libraries called directly (engine.timing.baselines); the last two are
what a PyTorch user gets by tuning inside torch (engine.timing.torch_baselines): TunableOp's
per-shape cuBLASLt choice and Inductor's max-autotune (Triton templates or cuBLAS, whichever it
timed faster). Those two tune for seconds per shape and layout, so a measurement asks for them
(TORCH_TUNED) where it wants them: `engine bench` and the campaign finals do, the search's short GPU
steps do not.
"""

from __future__ import annotations

from typing import Any

INDUCTOR = "inductor_max_autotune"
TUNABLEOP = "tunableop"
TORCH_TUNED = (INDUCTOR, TUNABLEOP)
NVIDIA = ("torch", "cublas", "cublaslt_heuristic", "cublaslt_autotune")  # every measurement's
BASELINES = (*NVIDIA, *TORCH_TUNED)
BASELINE_LABELS = {
    "torch": "torch.matmul",
    "cublas": "cuBLAS",
    "cublaslt_heuristic": "cuBLASLt (heuristic)",
    "cublaslt_autotune": "cuBLASLt (autotuned)",
    INDUCTOR: "Inductor max-autotune",
    TUNABLEOP: "TunableOp",
}
LAYOUTS = ("nn", "tn")
INDUCTOR_CONFIG_KEYS = ("tile_shape", "num_stages", "num_warps", "GROUP_M")


def runner_names(baselines: tuple[str, ...] | list[str] = BASELINES) -> set[str]:
    """The runner names a measurement gives the baselines: ``<baseline>_<layout>``."""
    return {f"{b}_{layout}" for b in baselines for layout in LAYOUTS}


def tuned_label(report: dict[str, Any]) -> str | None:
    """What a torch-tuned baseline ran, in a few words, from its tuning report: Inductor's
    ``triton triton_mm_3 (tile_shape=(64, 32, 32), num_stages=5, …)`` or ``aten mm``;
    TunableOp's chosen kernels. None where the report does not say."""
    if "results" in report:
        kernels = [str(r.get("kernel")) for r in report["results"] if r.get("kernel")]
        return ", ".join(kernels) or None
    pick = report.get("pick") or {}
    runs = report.get("runs") or pick.get("backend")
    if not runs and not pick:
        return None
    info = pick.get("info") or {}
    config = ", ".join(f"{k}={info[k]}" for k in INDUCTOR_CONFIG_KEYS if k in info)
    name = pick.get("name", "?")
    return f"{runs or '?'} {name}" + (f" ({config})" if config else "")
