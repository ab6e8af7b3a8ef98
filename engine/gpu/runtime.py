"""Loads compiled kernel libraries (the gemmforge C ABI) and the NVIDIA baseline shim via ctypes.

Loading runs a library's static initialisers in this process: only the verifier and benchmark
child processes load candidates, never a worker.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from engine import abi

_VOIDP = ctypes.c_void_p
_INT = ctypes.c_int
_SIZE = ctypes.c_size_t


class LoadError(RuntimeError):
    """A library that cannot be used: missing file, missing symbol or a different ABI version."""


class KernelLibrary:
    """A candidate kernel: ``launch`` enqueues C = A·B on a stream and returns a cudaError_t."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self._lib = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            raise LoadError(f"cannot load {self.path.name}: {exc}") from exc
        missing = [name for name in abi.REQUIRED_SYMBOLS if not hasattr(self._lib, name)]
        if missing:
            raise LoadError(f"{self.path.name} does not export {', '.join(missing)}")
        version_fn = self._lib[abi.VERSION_SYMBOL]
        version_fn.restype = _INT
        version_fn.argtypes = []
        version = version_fn()
        if version != abi.ABI_VERSION:
            raise LoadError(
                f"{self.path.name} has ABI version {version}, expected {abi.ABI_VERSION}"
            )
        self._hgemm = self._lib[abi.ENTRY_SYMBOL]
        self._hgemm.restype = _INT
        self._hgemm.argtypes = [_VOIDP, _VOIDP, _VOIDP, _INT, _INT, _INT, _VOIDP, _VOIDP]
        self._workspace = self._lib[abi.WORKSPACE_SYMBOL]
        self._workspace.restype = _SIZE
        self._workspace.argtypes = [_INT, _INT, _INT]

    def workspace_size(self, m: int, n: int, k: int) -> int:
        return int(self._workspace(m, n, k))

    def launch(
        self, a: int, b: int, c: int, m: int, n: int, k: int, workspace: int, stream: int
    ) -> int:
        return int(self._hgemm(a, b, c, m, n, k, workspace or None, stream or None))


class BaselineLibrary:
    """The cuBLAS / cuBLASLt shim built from engine/cuda/baselines.cu."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            lib = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            raise LoadError(f"cannot load {self.path.name}: {exc}") from exc
        self._init = lib.baselines_init
        self._init.restype = _INT
        self._version = lib.baselines_cublas_version
        self._version.restype = _SIZE
        self._cublas = lib.cublas_hgemm
        self._cublas.restype = _INT
        self._cublas.argtypes = [
            _VOIDP,
            _VOIDP,
            _VOIDP,
            _INT,
            _INT,
            _INT,
            _VOIDP,
            _SIZE,
            _INT,
            _VOIDP,
        ]
        self._plan = lib.cublaslt_plan
        self._plan.restype = _INT
        self._plan.argtypes = [_INT, _INT, _INT, _INT, _SIZE, _INT, ctypes.POINTER(_INT)]
        self._lt = lib.cublaslt_hgemm
        self._lt.restype = _INT
        self._lt.argtypes = [_INT, _INT, _VOIDP, _VOIDP, _VOIDP, _VOIDP, _VOIDP]
        self._algo_config = lib.cublaslt_algo_config
        self._algo_config.restype = _INT
        self._algo_config.argtypes = [_INT, _INT, ctypes.POINTER(ctypes.c_int64), _INT]
        self._noop = lib.baselines_noop
        self._noop.restype = _INT
        self._noop.argtypes = [_VOIDP, _VOIDP, _VOIDP, _INT, _INT, _INT, _VOIDP, _VOIDP]
        status = self._init()
        if status != 0:
            raise LoadError(f"cuBLAS initialisation failed with status {status}")

    @property
    def cublaslt_version(self) -> int:
        return int(self._version())

    def cublas(
        self,
        a: int,
        b: int,
        c: int,
        m: int,
        n: int,
        k: int,
        workspace: int,
        workspace_bytes: int,
        tn: bool,
        stream: int,
    ) -> int:
        return int(
            self._cublas(
                a, b, c, m, n, k, workspace or None, workspace_bytes, int(tn), stream or None
            )
        )

    def cublaslt_plan(
        self, m: int, n: int, k: int, tn: bool, workspace_bytes: int, max_algos: int
    ) -> tuple[int, int]:
        """Returns (plan id, number of heuristic algorithms); raises LoadError on failure."""
        count = _INT(0)
        plan = self._plan(m, n, k, int(tn), workspace_bytes, max_algos, ctypes.byref(count))
        if plan < 0:
            raise LoadError(f"cuBLASLt plan for {m}x{n}x{k} failed with status {plan}")
        return plan, count.value

    def cublaslt_algo_config(self, plan: int, algo: int, count: int) -> list[int]:
        """The first ``count`` configuration attributes of a plan's algorithm (cuBLASLt's
        cublasLtMatmulAlgoConfigAttributes_t order; -1 where it reports none)."""
        values = (ctypes.c_int64 * count)()
        if self._algo_config(plan, algo, values, count) < 0:
            raise LoadError(f"no cuBLASLt algorithm {algo} in plan {plan}")
        return list(values)

    def cublaslt(
        self, plan: int, algo: int, a: int, b: int, c: int, workspace: int, stream: int
    ) -> int:
        return int(self._lt(plan, algo, a, b, c, workspace or None, stream or None))

    def noop(
        self, a: int, b: int, c: int, m: int, n: int, k: int, workspace: int, stream: int
    ) -> int:
        return int(self._noop(a, b, c, m, n, k, workspace or None, stream or None))
