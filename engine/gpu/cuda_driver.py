"""The CUDA driver through ctypes, without torch: this GPU's arch, and a tiny health probe
(also resident: ``cuda_driver.py serve``, with NVML's view of the GPU).

Importing torch and creating its CUDA context takes seconds; libcuda alone takes a fraction of
one. engine.execution.gpu_step asks for the arch here so that it can start its verification children
before it imports torch, and engine.gpu.health_probe runs this file as a script
(``python -I cuda_driver.py probe``) for its per-step CUDA call, falling back to torch when
anything here fails. Only the standard library is imported.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence

_COMPUTE_CAPABILITY_MAJOR = 75  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
_COMPUTE_CAPABILITY_MINOR = 76
_STREAM_WAIT_VALUE_GEQ = 0  # CU_STREAM_WAIT_VALUE_GEQ
PROBE_ELEMENTS = 4096
PROBE_OFFSET = 7
# PTX for sm_75 runs (JIT-compiled by the driver) on every later GPU: out[i] = i + offset.
PROBE_PTX = b"""
.version 6.3
.target sm_75
.address_size 64

.visible .entry gemmforge_probe(
    .param .u64 gemmforge_probe_param_0,
    .param .u32 gemmforge_probe_param_1,
    .param .u32 gemmforge_probe_param_2
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [gemmforge_probe_param_0];
    ld.param.u32 %r1, [gemmforge_probe_param_1];
    ld.param.u32 %r2, [gemmforge_probe_param_2];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r6, %r1;
    @%p1 bra $L__done;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r6, 4;
    add.s64 %rd4, %rd2, %rd3;
    add.s32 %r7, %r6, %r2;
    st.global.u32 [%rd4], %r7;
$L__done:
    ret;
}
"""


class DriverError(RuntimeError):
    """libcuda is missing, or one of its calls failed."""


class Driver:
    def __init__(self, path: str = "libcuda.so.1") -> None:
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as exc:
            raise DriverError(f"cannot load {path}: {exc}") from None
        c_int_p = ctypes.POINTER(ctypes.c_int)
        c_void_pp = ctypes.POINTER(ctypes.c_void_p)
        u64 = ctypes.c_uint64
        self._sig("cuInit", ctypes.c_uint)
        self._sig("cuDeviceGet", c_int_p, ctypes.c_int)
        self._sig("cuDeviceGetAttribute", c_int_p, ctypes.c_int, ctypes.c_int)
        self._sig("cuDeviceTotalMem_v2", ctypes.POINTER(ctypes.c_size_t), ctypes.c_int)
        self._sig("cuDeviceGetPCIBusId", ctypes.c_char_p, ctypes.c_int, ctypes.c_int)
        self._sig("cuDevicePrimaryCtxRetain", c_void_pp, ctypes.c_int)
        self._sig("cuCtxSetCurrent", ctypes.c_void_p)
        self._sig("cuCtxSynchronize")
        self._sig("cuModuleLoadData", c_void_pp, ctypes.c_char_p)
        self._sig("cuModuleGetFunction", c_void_pp, ctypes.c_void_p, ctypes.c_char_p)
        self._sig("cuMemAlloc_v2", ctypes.POINTER(u64), ctypes.c_size_t)
        self._sig("cuMemFree_v2", u64)
        self._sig("cuMemsetD32_v2", u64, ctypes.c_uint, ctypes.c_size_t)
        self._sig("cuMemcpyDtoH_v2", ctypes.c_void_p, u64, ctypes.c_size_t)
        self._sig(
            "cuLaunchKernel",
            ctypes.c_void_p,
            *(ctypes.c_uint,) * 7,
            ctypes.c_void_p,
            c_void_pp,
            c_void_pp,
        )
        self._sig("cuGetErrorString", ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))

    def _sig(self, name: str, *argtypes: object) -> None:
        try:
            function = getattr(self.lib, name)
        except AttributeError:
            raise DriverError(f"libcuda has no {name}") from None
        function.argtypes = list(argtypes)
        function.restype = ctypes.c_int

    def __call__(self, name: str, *args: object) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            why = text.value.decode(errors="replace") if text.value else "unknown error"
            raise DriverError(f"{name} failed: {why} ({status})")

    def stream_wait_value32(self, stream: int, address: int, value: int) -> None:
        """Enqueues on ``stream`` a wait until the 32-bit word at ``address`` (device memory, or
        pinned host memory under unified addressing) is >= ``value``; no kernel runs meanwhile."""
        if not hasattr(self, "_wait_value_declared"):
            self._sig(
                "cuStreamWaitValue32_v2",
                ctypes.c_void_p,
                ctypes.c_uint64,
                ctypes.c_uint32,
                ctypes.c_uint,
            )
            self._wait_value_declared = True
        self("cuStreamWaitValue32_v2", stream, address, value, _STREAM_WAIT_VALUE_GEQ)

    def device(self, index: int = 0) -> int:
        self("cuInit", 0)
        device = ctypes.c_int()
        self("cuDeviceGet", ctypes.byref(device), index)
        return device.value

    def arch(self, index: int = 0) -> str:
        device = self.device(index)
        major, minor = ctypes.c_int(), ctypes.c_int()
        self("cuDeviceGetAttribute", ctypes.byref(major), _COMPUTE_CAPABILITY_MAJOR, device)
        self("cuDeviceGetAttribute", ctypes.byref(minor), _COMPUTE_CAPABILITY_MINOR, device)
        return f"sm_{major.value}{minor.value}"


def device_total_memory(index: int = 0) -> int | None:
    """Visible device ``index``'s memory in bytes (no context is created); None without one."""
    try:
        driver = Driver()
        device = driver.device(index)
        total = ctypes.c_size_t()
        driver("cuDeviceTotalMem_v2", ctypes.byref(total), device)
    except DriverError:
        return None
    return total.value


def device_arch(index: int = 0) -> str:
    """The compute capability of visible device ``index`` as ``sm_XY`` (raises DriverError)."""
    return Driver().arch(index)


def local_arch(default: str = "sm_90") -> str:
    """This GPU's arch: from libcuda, else from torch, else ``default`` (no GPU visible)."""
    try:
        return device_arch()
    except DriverError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except ImportError:
        pass
    return default


class ProbeSession:
    """A context on visible device ``index`` with the probe kernel loaded and its buffer
    allocated, once; :meth:`run` launches the kernel, copies its output back and checks it
    (raises DriverError on any failure)."""

    def __init__(self, index: int = 0) -> None:
        cu = self.cu = Driver()
        self.device = cu.device(index)
        self.arch = cu.arch(index)
        context = ctypes.c_void_p()
        cu("cuDevicePrimaryCtxRetain", ctypes.byref(context), self.device)
        cu("cuCtxSetCurrent", context)
        module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        cu("cuModuleLoadData", ctypes.byref(module), PROBE_PTX)
        cu("cuModuleGetFunction", ctypes.byref(self.function), module, b"gemmforge_probe")
        self.pointer = ctypes.c_uint64()
        cu("cuMemAlloc_v2", ctypes.byref(self.pointer), PROBE_ELEMENTS * 4)

    def run(self) -> str:
        cu = self.cu
        cu("cuMemsetD32_v2", self.pointer, 0xFFFFFFFF, PROBE_ELEMENTS)
        count, offset = ctypes.c_uint32(PROBE_ELEMENTS), ctypes.c_uint32(PROBE_OFFSET)
        params = (ctypes.c_void_p * 3)(
            ctypes.addressof(self.pointer), ctypes.addressof(count), ctypes.addressof(offset)
        )
        threads = 256
        blocks = (PROBE_ELEMENTS + threads - 1) // threads
        cu("cuLaunchKernel", self.function, blocks, 1, 1, threads, 1, 1, 0, None, params, None)
        cu("cuCtxSynchronize")
        host = (ctypes.c_uint32 * PROBE_ELEMENTS)()
        cu("cuMemcpyDtoH_v2", ctypes.addressof(host), self.pointer, PROBE_ELEMENTS * 4)
        wrong = sum(host[i] != i + PROBE_OFFSET for i in range(PROBE_ELEMENTS))
        if wrong:
            raise DriverError(f"the probe kernel wrote wrong values at {wrong} elements")
        return f"probe kernel ok on {self.arch}"

    def close(self) -> None:
        self.cu("cuMemFree_v2", self.pointer)

    def pci_bus_id(self) -> bytes:
        text = ctypes.create_string_buffer(32)
        self.cu("cuDeviceGetPCIBusId", text, len(text), self.device)
        return text.value


def probe(index: int = 0) -> str:
    """A context on the device, a kernel launched (JIT from PTX), its output copied back and
    checked. Returns a line for the log; raises DriverError on any failure."""
    session = ProbeSession(index)
    try:
        return session.run()
    finally:
        session.close()


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]  # fmt: skip


class Nvml:
    """NVML (what nvidia-smi asks) for one device, found by its PCI bus id: NVML numbers the
    GPUs without regard to CUDA_VISIBLE_DEVICES."""

    def __init__(self, pci_bus_id: bytes, path: str = "libnvidia-ml.so.1") -> None:
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as exc:
            raise DriverError(f"cannot load {path}: {exc}") from None
        self.lib.nvmlErrorString.restype = ctypes.c_char_p
        self("nvmlInit_v2")
        self.handle = ctypes.c_void_p()
        self("nvmlDeviceGetHandleByPciBusId_v2", ctypes.c_char_p(pci_bus_id),
             ctypes.byref(self.handle))  # fmt: skip

    def __call__(self, name: str, *args: object) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            why = self.lib.nvmlErrorString(status) or b"unknown error"
            raise DriverError(f"{name} failed: {why.decode(errors='replace')} ({status})")

    def line(self) -> str:
        """nvidia-smi's ``--query-gpu=name,temperature.gpu,utilization.gpu,memory.used,
        memory.total --format=csv,noheader`` line."""
        name = ctypes.create_string_buffer(96)
        self("nvmlDeviceGetName", self.handle, name, ctypes.c_uint(len(name)))
        temperature = ctypes.c_uint()
        self("nvmlDeviceGetTemperature", self.handle, 0, ctypes.byref(temperature))
        utilization, memory = _Utilization(), _Memory()
        self("nvmlDeviceGetUtilizationRates", self.handle, ctypes.byref(utilization))
        self("nvmlDeviceGetMemoryInfo", self.handle, ctypes.byref(memory))
        used, total = memory.used >> 20, memory.total >> 20
        return (
            f"{name.value.decode(errors='replace')}, {temperature.value}, "
            f"{utilization.gpu} %, {used} MiB, {total} MiB"
        )


def serve(index: int = 0) -> int:
    """The resident probe (engine.gpu.health_probe.ResidentProbe): set up once, then one answer line
    per request line on stdin, ``ok <nvidia-smi's line>`` or ``error <why>``; ends at the end of
    its input (its parent gone). A failed set-up is the first answer, then it exits."""
    try:
        session = ProbeSession(index)
        nvml = Nvml(session.pci_bus_id())
    except DriverError as exc:
        sys.stdin.readline()
        print(f"error {exc}", flush=True)
        return 1
    while sys.stdin.readline():
        try:
            session.run()
            answer = f"ok {nvml.line()}"
        except DriverError as exc:
            answer = f"error {exc}"
        print(" ".join(answer.split()), flush=True)  # one line, whatever the message holds
    return 0


def main(argv: Sequence[str]) -> int:
    command = argv[0] if argv else "probe"
    if command == "serve":
        return serve()
    try:
        print(probe() if command == "probe" else device_arch())
    except DriverError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
