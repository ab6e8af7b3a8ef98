"""The timing protocols (engine.timing.protocols, engine.timing.measure.run_protocol), named without
importing torch.

device: CUDA events around each call, L2 flushed before each, median; offline: CUDA-L2's offline
mode, host wall clock around each call, mean; server: offline with Poisson idle gaps; graph: per
call time from CUDA-graph replays. A campaign's reward is the speedup in one of them (the web
app's launch form offers these names and nothing else).
"""

from __future__ import annotations

PROTOCOLS = ("device", "offline", "server", "graph")
DEFAULT_PROTOCOL = "device"
# Raised when what a protocol measures changes: results kept under an older revision (a
# campaign's saved finals) are measured again. 2: the device protocol holds the stream while the
# runner's call is enqueued (engine.timing.protocols.Bench.hold_for_host_work).
PROTOCOL_REVISION = 2
# How L2 is emptied before each timed call (engine.timing.protocols.Bench): write zeroes a buffer
# four times L2's size (the default, as the usual harnesses do), read sums it.
L2_FLUSHES = ("write", "read")
