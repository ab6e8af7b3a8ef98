"""The baselines' names and labels, without torch: the web app and the report import them.

The first four are NVIDIA's libraries called directly (engine.baselines); the last two are what a
PyTorch user gets by tuning inside torch (engine.torch_baselines): TunableOp's per-shape cuBLASLt
choice and Inductor's max-autotune (Triton templates or cuBLAS, whichever it timed faster). Those
two tune for seconds per shape and layout, so a measurement asks for them (TORCH_TUNED) where it
wants them: `engine bench` and the campaign finals do, the search's short GPU steps do not.
"""

from __future__ import annotations

INDUCTOR = "inductor_max_autotune"
TUNABLEOP = "tunableop"
TORCH_TUNED = (INDUCTOR, TUNABLEOP)
BASELINES = ("torch", "cublas", "cublaslt_heuristic", "cublaslt_autotune", *TORCH_TUNED)
BASELINE_LABELS = {
    "torch": "torch.matmul",
    "cublas": "cuBLAS",
    "cublaslt_heuristic": "cuBLASLt (heuristic)",
    "cublaslt_autotune": "cuBLASLt (autotuned)",
    INDUCTOR: "Inductor max-autotune",
    TUNABLEOP: "TunableOp",
}
LAYOUTS = ("nn", "tn")


def runner_names(baselines: tuple[str, ...] | list[str] = BASELINES) -> set[str]:
    """The runner names a measurement gives the baselines: ``<baseline>_<layout>``."""
    return {f"{b}_{layout}" for b in baselines for layout in LAYOUTS}
