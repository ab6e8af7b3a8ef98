"""Campaigns without Django: propose → compile → verify → time → reward → learn.

executor.py          GpuExecutor protocol; LocalGpuExecutor (this GPU) and ReplayExecutor (recorded)
gpu_step.py          ``python -m engine.campaign.gpu_step``: one GPU step (verify and time a batch)
storage.py           CampaignStorage protocol; SqliteStorage for the CLI
round.py             one round: propose, compile, execute, records and rewards, learn (CLI and web)
loop.py              the CLI's rounds in one process: budgets, early stops, pipelined compiles, JSON
final.py             the final re-timing of each problem's best candidates in fresh processes
replay_benchmark.py  every search strategy against a recorded table, on the CPU
pretraining.py       recorded tables and campaigns as the shipped policy's training tasks

The search space, the proposers and the learned policy live in engine.propose.
"""
