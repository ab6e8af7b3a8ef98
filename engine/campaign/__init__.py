"""Campaigns without Django: propose → compile → verify → time → reward → learn.

storage.py           CampaignStorage protocol; SqliteStorage for the CLI
round.py             one round: propose, compile, execute, records and rewards, learn (CLI and web)
loop.py              the CLI's rounds in one process: budgets, early stops, pipelined compiles, JSON
replay_benchmark.py  every search strategy against a recorded table, on the CPU
pretraining.py       recorded tables and campaigns as the shipped policy's training tasks

Candidates run on the GPU through engine.execution; the search space, the proposers and the
learned policy live in engine.propose.
"""
