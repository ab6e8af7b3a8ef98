"""Running compiled candidates on a GPU: executors, the GPU step child, the finals, the audit, the
reward.

executor.py   GpuExecutor protocol; LocalGpuExecutor (this GPU) and ReplayExecutor (recorded)
gpu_step.py   ``python -m engine.execution.gpu_step``: one GPU step (verify and time a batch)
gpu_child.py  starting that child from another process (its arguments, environment, standby)
final.py      the final re-timing of each problem's best candidates in fresh processes
audit.py      a fresh-seed re-verification, sanitizer and fresh-process re-time of a too-good win
reward.py     the log speedup a timed candidate earns
"""
