"""What a PyTorch user gets by tuning inside torch, as baseline runners
(engine.timing.protocols.Runner):

  inductor_max_autotune  ``torch.compile(mode="max-autotune-no-cudagraphs")`` of a plain matmul,
                         compiled per shape and layout; Inductor times its Triton mm templates
                         and cuBLAS (aten) and keeps the fastest.
  tunableop              torch.cuda.tunable: torch.mm with TunableOp on, tuned for the shape on
                         its first call in this process. On CUDA its candidates are "Default"
                         (torch's usual cuBLAS call) and, from PyTorch 2.14 on (pytorch#186270),
                         cuBLASLt's heuristic algorithms (8 by default); before 2.14 Default is
                         the only one, so there this baseline is torch.matmul through TunableOp,
                         and its record says so (the kernels it chose, torch's version).

Both tune in the measuring process, before any timing, and report what they picked and how long
the tuning took (the first call's wall clock, compilation included). Their calls keep what a user
pays on the host: Dynamo's guards and Inductor's wrapper, TunableOp's lookup. The compiled matmul
returns a new tensor per call, as a user's ``y = f(a, b)`` does: an ``out=`` argument would add a
copy kernel after cuBLAS; the runner hands that tensor to the operands as their C (the checks read
C after each call).
"""

from __future__ import annotations

import re
import tempfile
import time
import types
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.problem import Layout, Problem
from engine.timing.baseline_names import INDUCTOR, TUNABLEOP
from engine.timing.protocols import Operands, Runner

INDUCTOR_MODE = "max-autotune-no-cudagraphs"
RUNNER_ERROR = 1  # the status a launch returns when its output is not a (M, N) row-major C


def _mm_nn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)


def _mm_tn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b.t())


def matmul_function(problem: Problem, layout: Layout) -> Callable[..., torch.Tensor]:
    """A plain matmul for ``layout`` (TN: B stored N×K) with a code object of its own.

    Dynamo keeps compiled entries per code object: one function for every shape would collect
    them all (each new shape a recompile, guards checked one entry after another on every call,
    and eager fallback past the recompile limit), which no user compiling one matmul pays."""
    template = _mm_nn if layout is Layout.NN else _mm_tn
    name = f"{template.__name__}_{problem.m}x{problem.n}x{problem.k}"
    code = template.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, template.__globals__, name)


@dataclass
class InductorTuning:
    """What Inductor chose for one matmul and how long choosing took."""

    seconds: float  # the first call's wall clock: tracing, autotuning, compiling, running
    pick: dict[str, Any] | None  # the fastest choice Inductor timed (its name, config, time)
    choices: dict[str, float] = field(default_factory=dict)  # every choice's time (ms)
    runs: str | None = None  # what the generated code calls: "triton" or "aten" (cuBLAS)
    kernels: list[str] = field(default_factory=list)  # the Triton kernels in the generated code

    def to_dict(self) -> dict[str, Any]:
        return {
            "tuning_seconds": self.seconds,
            "pick": self.pick,
            "choices": self.choices,
            "runs": self.runs,
            "kernels": self.kernels,
        }


def describe_choice(choice: Any, milliseconds: float) -> dict[str, Any]:
    """A choice Inductor timed (a ChoiceCaller) as JSON: name, backend, config."""
    try:
        info = {k: v for k, v in dict(choice.info_dict()).items() if _plain(v)}
    except Exception:  # a caller of another torch version: its name still counts
        info = {}
    backend = str(info.get("backend", "")).lower()
    return {
        "name": str(getattr(choice, "name", choice)),
        "backend": "aten" if backend == "extern" else backend or "unknown",
        "description": str(getattr(choice, "description", "")),
        "info": info,
        "ms": milliseconds,
    }


def _plain(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def pick_of(timings: dict[Any, float]) -> tuple[dict[str, Any] | None, dict[str, float]]:
    """The fastest finite choice of an autotuning's timings and the whole table by name."""
    table = {str(getattr(c, "name", c)): float(t) for c, t in timings.items()}
    finite = {c: t for c, t in timings.items() if t == t and t != float("inf")}
    if not finite:
        return None, table
    best = min(finite, key=finite.__getitem__)
    return describe_choice(best, float(finite[best])), table


TRITON_KERNEL = re.compile(r"^(triton_\w+)\s*=\s*async_compile\.triton\(", re.MULTILINE)


def what_runs(sources: list[str]) -> tuple[str | None, list[str]]:
    """From Inductor's generated wrapper code: whether the matmul is an aten (cuBLAS) call or a
    Triton kernel, and the Triton kernels it defines."""
    code = "\n".join(sources)
    kernels = TRITON_KERNEL.findall(code)
    if re.search(r"extern_kernels\.(mm|addmm|bmm)\(", code):
        return "aten", kernels
    if kernels:
        return "triton", kernels
    return None, kernels


@contextmanager
def _autotune_feedback(timings: list[dict[Any, float]]):
    """Collects every autotuning's timings while compiling (Inductor's feedback savers)."""
    from torch._inductor import select_algorithm

    def saver(found: dict[Any, float], *_args: Any) -> None:
        timings.append(dict(found))

    add = getattr(select_algorithm, "add_feedback_saver", None)
    if add is None:  # a torch without the hook: the pick then comes from the code alone
        yield
        return
    add(saver)
    try:
        yield
    finally:
        get_cache = getattr(select_algorithm, "get_algorithm_selector_cache", None)
        cache = (
            get_cache()
            if get_cache
            else getattr(select_algorithm, "_ALGORITHM_SELECTOR_CACHE", None)
        )
        fns = getattr(cache, "feedback_saver_fns", [])
        if saver in fns:
            fns.remove(saver)


@contextmanager
def _output_code(sources: list[str]):
    """Collects the wrapper code Inductor generates while compiling (without resetting Dynamo,
    as torch._inductor.utils.run_and_get_code does: that would drop the other runners' entries).
    Inductor calls ``GraphLowering.save_output_code(code)`` when it is set (None by default)."""
    from torch._inductor.graph import GraphLowering

    if "save_output_code" not in GraphLowering.__dict__:  # another torch: the pick stands alone
        yield
        return
    original = GraphLowering.__dict__["save_output_code"]

    def save(*args: Any) -> None:  # called on the class (code) or, elsewhere, bound (self, code)
        sources.append(str(args[-1]))
        if callable(original):
            original(args[-1])

    GraphLowering.save_output_code = save  # type: ignore[assignment]
    try:
        yield
    finally:
        GraphLowering.save_output_code = original  # type: ignore[assignment]


def compile_inductor(
    problem: Problem, layout: Layout, a: torch.Tensor, b: torch.Tensor
) -> tuple[Callable[..., torch.Tensor], InductorTuning]:
    """The compiled matmul and its tuning, from a first call on ``a`` and ``b`` (on the
    current stream). Caches are off for that call, so the tuning is this process's own, timed
    in full, as a user's first run pays it."""
    import torch._inductor.config as inductor_config

    compiled = torch.compile(
        matmul_function(problem, layout), mode=INDUCTOR_MODE, dynamic=False, fullgraph=True
    )
    timings: list[dict[Any, float]] = []
    sources: list[str] = []
    with ExitStack() as stack:
        stack.enter_context(inductor_config.patch(force_disable_caches=True))
        stack.enter_context(_autotune_feedback(timings))
        stack.enter_context(_output_code(sources))
        torch.cuda.synchronize()
        started = time.perf_counter()
        compiled(a, b)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    pick, choices = pick_of(timings[-1]) if timings else (None, {})
    runs, kernels = what_runs(sources)
    return compiled, InductorTuning(seconds, pick, choices, runs, kernels)


def returning_runner(
    name: str,
    kind: str,
    layout: Layout,
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    info: dict[str, Any],
) -> Runner:
    """A runner around ``fn(a, b) -> C``: the new C becomes the operands' C."""

    def launch(ops: Operands, _stream: int) -> int:
        out = fn(ops.a, ops.b(layout))
        if out.shape != ops.c.shape or out.dtype != ops.c.dtype or not out.is_contiguous():
            return RUNNER_ERROR
        ops.c = out
        return 0

    return Runner(name, kind, layout, launch, info)


def inductor_runner(
    problem: Problem,
    layout: Layout,
    ops: Operands,
    *,
    compile: Callable[..., tuple[Callable[..., torch.Tensor], InductorTuning]] = compile_inductor,
) -> tuple[Runner, dict[str, Any]]:
    """Inductor's max-autotune matmul for ``layout``, compiled and tuned now on ``ops``."""
    fn, tuning = compile(problem, layout, ops.a, ops.b(layout))
    report = tuning.to_dict()
    runner = returning_runner(
        f"{INDUCTOR}_{layout.value}", INDUCTOR, layout, fn, {"pick": report["pick"]}
    )
    return runner, report


class TunableOp:
    """torch.cuda.tunable, switched on only around the tunableop runner's calls (it is global to
    the process: left on, torch.matmul and Inductor's cuBLAS calls would be tuned too). Results
    stay in memory, never read from or written to a file: the tuning is this process's own."""

    def __init__(
        self, tunable: Any = None, sync: Callable[[], None] = torch.cuda.synchronize
    ) -> None:
        self.tunable = tunable if tunable is not None else torch.cuda.tunable
        self.sync = sync
        # a file TunableOp would read its results from when first enabled: one that cannot exist
        self._dir = tempfile.TemporaryDirectory(prefix="gemmforge-tunableop-")
        self.tunable.set_filename(str(Path(self._dir.name) / "results%d.csv"))
        if hasattr(self.tunable, "write_file_on_exit"):  # gone from torch.cuda.tunable in 2.11
            self.tunable.write_file_on_exit(False)
        self.tunable.tuning_enable(False)

    def settings(self) -> dict[str, Any]:
        t = self.tunable
        settings = {
            "max_tuning_duration_ms": t.get_max_tuning_duration(),
            "max_tuning_iterations": t.get_max_tuning_iterations(),
            "torch_version": torch.__version__,
        }
        if hasattr(t, "get_cublaslt_requested_algo_count"):  # PyTorch 2.14 on
            settings["cublaslt_requested_algo_count"] = t.get_cublaslt_requested_algo_count()
        return settings

    def results(self) -> list[tuple[str, ...]]:
        return [tuple(str(x) for x in row) for row in self.tunable.get_results()]

    @contextmanager
    def on(self, *, tuning: bool = False):
        """TunableOp on for the block (two calls into torch: what the runner pays per call above
        torch.mm's own host time); tuning new shapes only when ``tuning``."""
        self.tunable.enable(True)
        if tuning:
            self.tunable.tuning_enable(True)
        try:
            yield
        finally:
            if tuning:
                self.tunable.tuning_enable(False)
            self.tunable.enable(False)

    def tune(self, call: Callable[[], Any]) -> dict[str, Any]:
        """Runs ``call`` once with tuning on; what TunableOp chose and how long it took."""
        before = set(self.results())
        with self.on(tuning=True):
            self.sync()
            started = time.perf_counter()
            call()
            self.sync()
            seconds = time.perf_counter() - started
        chosen = [r for r in self.results() if r not in before]
        return {
            "tuning_seconds": seconds,
            "results": [
                {"op": r[0], "params": r[1], "kernel": r[2], "ms": _float(r[3])}
                for r in chosen
                if len(r) >= 4
            ],
            "settings": self.settings(),
        }


def _float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


_TUNABLEOP: TunableOp | None = None


def tunableop() -> TunableOp:
    """The process's TunableOp switch (one: its results are the process's)."""
    global _TUNABLEOP
    if _TUNABLEOP is None:
        _TUNABLEOP = TunableOp()
    return _TUNABLEOP


def tunableop_runner(
    problem: Problem, layout: Layout, ops: Operands, *, switch: TunableOp | None = None
) -> tuple[Runner, dict[str, Any]]:
    """torch.mm with TunableOp on, tuned now for ``problem`` in ``layout``; the report says
    which kernel TunableOp chose (the first call tunes every shape it has not seen)."""
    switch = switch or tunableop()

    def call(ops: Operands) -> None:
        b = ops.b(layout)
        torch.mm(ops.a, b if layout is Layout.NN else b.t(), out=ops.c)

    report = switch.tune(lambda: call(ops))

    def launch(ops: Operands, _stream: int) -> int:
        with switch.on():
            call(ops)
        return 0

    kernels = [r["kernel"] for r in report["results"]]
    runner = Runner(f"{TUNABLEOP}_{layout.value}", TUNABLEOP, layout, launch, {"kernels": kernels})
    return runner, report


TorchRunnerFactory = Callable[[Problem, Layout, Operands], tuple[Runner, dict[str, Any]]]
FACTORIES: dict[str, TorchRunnerFactory] = {INDUCTOR: inductor_runner, TUNABLEOP: tunableop_runner}


def torch_tuned_runners(
    problem: Problem,
    ops: Operands,
    baselines: tuple[str, ...] | list[str],
    layouts: tuple[Layout, ...] | list[Layout],
    *,
    stream: torch.cuda.Stream | None = None,
    factories: dict[str, TorchRunnerFactory] | None = None,
) -> tuple[list[Runner], dict[str, Any]]:
    """The runners of ``baselines`` (names of TORCH_TUNED) in every layout, each tuned now on
    ``stream``, and their reports keyed by runner name."""
    factories = factories or FACTORIES
    unknown = [b for b in baselines if b not in factories]
    if unknown:
        raise ValueError(f"unknown torch baselines {unknown}: expected some of {list(factories)}")
    runners: list[Runner] = []
    reports: dict[str, Any] = {}
    with torch.cuda.stream(stream) if stream is not None else _nothing():
        for layout in layouts:
            for baseline in baselines:
                runner, report = factories[baseline](problem, layout, ops)
                runners.append(runner)
                reports[runner.name] = report
    return runners, reports


@contextmanager
def _nothing():
    yield
