"""Board power and SM clock while kernels run, read from NVML (pynvml / nvidia-ml-py, optional).

Large problems run at the card's power cap, where the SM clock drops: a kernel that holds a higher
clock at the same power wins time there. Two views, both in the device protocol's record:

  during the run   a thread samples NVML while the device protocol times every runner (the
                   runners interleave call by call, so this is the run's, shared by all);
  per runner       each runner alone, back to back without L2 flushes (the sustained state a
                   serving loop puts the card in), for a fraction of a second while sampling.

Without pynvml, or without NVML access, nothing is recorded: the timings never depend on it.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

SAMPLE_INTERVAL_S = 0.005
# NVML's clocks-event reason bits (nvml.h): the SM clock held down by the power cap
POWER_CAP_REASONS = 0x4 | 0x80  # SW power cap, HW power brake


class Reader(Protocol):
    """One GPU's instantaneous power (W), SM clock (MHz) and clocks-event reasons (bit mask)."""

    source: str  # which NVML power reading: "instant" or "average"

    def read(self) -> tuple[float | None, float | None, int | None]: ...


@dataclass
class NvmlReader:
    """NVML for one device handle. ``instant`` power (the field NVML_FI_DEV_POWER_INSTANT) where
    the driver has it; else nvmlDeviceGetPowerUsage, which Hopper averages over about a second."""

    nvml: Any
    handle: Any
    source: str = "average"

    def __post_init__(self) -> None:
        fid = getattr(self.nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if fid is not None and self._instant(fid) is not None:
            self.source = "instant"
            self._fid = fid

    def _instant(self, fid: int) -> float | None:
        try:
            [value] = self.nvml.nvmlDeviceGetFieldValues(self.handle, [fid])
        except Exception:  # an older driver or binding: fall back to the average
            return None
        if getattr(value, "nvmlReturn", 1) != 0:
            return None
        return float(value.value.uiVal) / 1000.0

    def read(self) -> tuple[float | None, float | None, int | None]:
        nvml, handle = self.nvml, self.handle
        if self.source == "instant":
            power = self._instant(self._fid)
        else:
            power = _try(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        clock = _try(lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)))
        reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        reasons = _try(lambda: int(reasons_fn(handle))) if reasons_fn else None
        return power, clock, reasons


def _try(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # a reading NVML refuses on this GPU is left out, not fatal
        return None


def open_reader(device: int | None = None) -> NvmlReader | None:
    """NVML for torch's CUDA ``device``, found by PCI bus id (so CUDA_VISIBLE_DEVICES cannot
    mismatch it) or, where torch does not give the bus id, by torch's own NVML index; None
    without pynvml or NVML."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        import torch

        pynvml.nvmlInit()
        device = torch.cuda.current_device() if device is None else device
        return NvmlReader(pynvml, _handle(pynvml, torch, device))
    except Exception:  # no NVML (a container without the library) or no such device
        return None


def _handle(pynvml: Any, torch: Any, device: int) -> Any:
    props = torch.cuda.get_device_properties(device)
    try:
        bus_id = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    except AttributeError:
        return pynvml.nvmlDeviceGetHandleByIndex(torch.cuda._get_nvml_device_index(device))
    return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)


@dataclass
class Sampler:
    """Samples ``reader`` every ``interval`` seconds on a thread while the block runs."""

    reader: Reader
    interval: float = SAMPLE_INTERVAL_S
    samples: list[tuple[float, float | None, float | None, int | None]] = field(
        default_factory=list
    )

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), *self.reader.read()))
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, Any]:
        return summarize(self.samples, self.reader.source)


def summarize(
    samples: Sequence[tuple[float, float | None, float | None, int | None]], source: str
) -> dict[str, Any]:
    """Mean, min and max power (W) and SM clock (MHz) over the samples, and the fraction of
    samples in which NVML said the power cap held the clock down."""
    power = [p for _, p, _, _ in samples if p is not None]
    clock = [c for _, _, c, _ in samples if c is not None]
    reasons = [r for _, _, _, r in samples if r is not None]
    out: dict[str, Any] = {"samples": len(samples), "power_source": source}
    if power:
        out["power_w"] = _spread(power)
    if clock:
        out["sm_clock_mhz"] = _spread(clock)
    if reasons:
        out["power_capped_fraction"] = sum(bool(r & POWER_CAP_REASONS) for r in reasons) / len(
            reasons
        )
    return out


def _spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def per_runner(
    runners: Sequence[Any],
    call: Callable[[Any], None],
    sync: Callable[[], None],
    reader: Reader,
    *,
    seconds: float,
    calls_per_sync: int = 20,
) -> dict[str, dict[str, Any]]:
    """Each runner alone, ``call(runner)`` back to back for ``seconds`` (a sync every
    ``calls_per_sync`` calls, so the queue stays short), NVML sampled meanwhile: {name: summary}.
    The first tenth of each runner's window is left out: the reading then still shows the
    runner before it."""
    out: dict[str, dict[str, Any]] = {}
    for runner in runners:
        with Sampler(reader) as sampler:
            started = time.monotonic()
            while time.monotonic() - started < seconds:
                for _ in range(calls_per_sync):
                    call(runner)
                sync()
        settled = started + 0.1 * seconds
        out[runner.name] = summarize([s for s in sampler.samples if s[0] >= settled], reader.source)
    return out
