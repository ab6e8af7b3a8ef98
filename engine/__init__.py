"""gemmforge engine: a library (no Django) that proposes, compiles, verifies and times kernels.

One folder per stage, in the order a candidate meets them; a module imports only from its own
stage, the stages before it and the top level (tests/engine/test_stage_order.py holds this):

  isolation/    the subprocess runner, the sandbox and the fork server every candidate runs under
  codegen/      kernel families, their config spaces and the CUDA (or Triton) source each renders
  compilation/  toolkit lookup, static gate, nvcc and Triton AOT compiles, the compile cache,
                kernels given as source
  gpu/          CUDA driver calls, MPS, health probes, environment, power, the kernel loader
  verify/       the verifier and its GPU child, numerics, sanitizer, timed-phase checks
  timing/       timing protocols, sessions, baselines, physics, floor model, ratios
  execution/    executors, the GPU step child, finals, audit, the reward
  propose/      random, evolutionary, transfer and mirror proposers; the learned policy (learn)
  llm/          LLM proposals and the LLM's RL fine-tuning
  campaign/     rounds of propose → compile → verify → time → learn, storage
  publish/      the report and kernel bundles
  commands/     ``python -m engine`` subcommands (argparse, then a call into the stages)
  cuda/         every CUDA source and kernel template that ships

The top level holds the vocabulary: problem.py (shapes, layouts), config.py (ENGINE_* settings),
outcomes.py (candidate statuses, verifier reasons), abi.py (the kernel C ABI), stats.py (quantiles,
summaries, stopping rules; used by verify/ and timing/) and cli.py.
"""

from engine.problem import Layout, Problem, ProblemError

__all__ = ["Layout", "Problem", "ProblemError"]
__version__ = "0.1.0"
