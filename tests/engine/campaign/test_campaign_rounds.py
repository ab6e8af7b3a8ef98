"""engine.campaign.loop runs every shape's rounds at once: the rounds are compiled together, a
shape's next round is proposed only after its round was rewarded, the next builds overlap the
GPU's runs, the stop rules hold shape by shape, and the run says what its user felt. Stub
executors and compilers synchronised by events; no GPU, no nvcc."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.campaign.loop import Campaign, CampaignSettings, campaign_report
from engine.campaign.storage import SqliteStorage
from engine.compilation.compile import CompileResult
from engine.execution.executor import Outcome, ReplayExecutor, ReplayTable
from engine.problem import Problem
from engine.propose.mix import make_proposers
from engine.propose.space import SearchSpace

ROOT = Path(__file__).resolve().parents[3]
RUN1 = ROOT / "bench/results/2026-12-02-h200-families/families-run1.json"
SHAPES = [Problem.parse(s, "tn") for s in ("4096x4096x4096", "1024x1024x1024", "256x256x256")]
# two shapes whose configs differ by name (one layout each): no build is shared between them
APART = [Problem.parse("4096x4096x4096", "tn"), Problem.parse("1024x1024x1024", "nn")]


@pytest.fixture(scope="module")
def table() -> ReplayTable:
    return ReplayTable.load([RUN1])


def built(ok: bool = True) -> CompileResult:
    return CompileResult(
        ok=ok,
        library=Path("/tmp/fake.so") if ok else None,
        source_hash="x",
        archs=("sm_90a",),
        command="nvcc",
        log="",
        seconds=2.0,
        cached=False,
        error=None if ok else "error: boom",
    )


class RecordingCompiler:
    """Builds everything; keeps the names of each call's configs (calls may come from several
    threads at once)."""

    def __init__(self, on_call=None):
        self.calls: list[list[str]] = []
        self.on_call = on_call
        self.lock = threading.Lock()

    def __call__(self, configs):
        names = [c.name for c in configs]
        with self.lock:
            self.calls.append(names)
        if self.on_call is not None:
            self.on_call(names)
        return [built() for _ in configs]


class TableGpu:
    """Needs libraries (so the loop compiles); answers from the replay table, one call per
    round, and lets a test act before each call."""

    needs_libraries = True

    def __init__(self, table: ReplayTable, before_execute=None):
        self.replay = ReplayExecutor(table)
        self.arch = table.arch
        self.calls: list[tuple[str, list[str]]] = []
        self.before_execute = before_execute

    def execute(self, problem, batch):
        if self.before_execute is not None:
            self.before_execute(len(self.calls), problem)
        self.calls.append((problem.key, [c.name for c in batch]))
        return self.replay.execute(problem, batch)


def campaign(table, *, executor, shapes=SHAPES, storage=None, compiler=None, **settings):
    mix = settings.pop("mix", {"random": 1.0})
    settings.setdefault("name", "c")
    settings.setdefault("budget", 12)
    settings.setdefault("batch_size", 4)
    return Campaign(
        shapes,
        settings=CampaignSettings(mix=mix, **settings),
        executor=executor,
        storage=storage or SqliteStorage(":memory:"),
        proposers=make_proposers(mix),
        space_for=lambda p: SearchSpace.from_configs(p, table.configs_for(p)),
        compiler=compiler or RecordingCompiler(),
    )


def rounds_by_shape(results) -> dict[str, dict[int, set[str]]]:
    out: dict[str, dict[int, set[str]]] = {}
    for result in results:
        for record in result.records:
            out.setdefault(result.problem.key, {}).setdefault(record.round, set()).add(record.name)
    return out


def test_without_pipelining_every_shapes_round_is_compiled_in_one_call(table):
    compiler = RecordingCompiler()
    c = campaign(table, executor=TableGpu(table), compiler=compiler, pipeline=False)
    results = c.run()
    rounds = rounds_by_shape(results)
    assert [len(r.records) for r in results] == [12, 12, 12]
    assert len(compiler.calls) == 3  # one build per wave of rounds, not one per shape and round
    for wave, call in enumerate(compiler.calls):
        expected = set().union(*(rounds[p.key][wave] for p in SHAPES))
        assert set(call) == expected
        assert len(call) == len(expected)  # a config two shapes proposed is built once
    assert c.throughput()["compiles"]["largest_batch"] == len(compiler.calls[0]) > 4


def test_a_shapes_next_round_is_proposed_only_after_its_round_was_rewarded(table):
    events: list[tuple[str, str, int]] = []

    class Learner:
        def learn(self, problem, space, records, *, stream, step):
            events.append(("learnt", problem.key, step))
            return True

    c = campaign(table, executor=TableGpu(table))
    c.round.learner = Learner()
    propose = c.round.propose

    def recording_propose(problem, space, history, *, round_no, **kwargs):
        events.append(("proposed", problem.key, round_no))
        rewarded = {r.round for r in history}
        assert rewarded == set(range(round_no)), "proposed before its last round was rewarded"
        return propose(problem, space, history, round_no=round_no, **kwargs)

    c.round.propose = recording_propose
    c.run()
    for problem in SHAPES:
        mine = [(kind, n) for kind, key, n in events if key == problem.key]
        assert mine[:2] == [("proposed", 0), ("learnt", 0)]
        for n in (1, 2):
            assert mine.index(("learnt", n - 1)) < mine.index(("proposed", n))


def test_every_shapes_first_round_builds_at_once_on_the_compile_jobs(table):
    first_rounds = threading.Barrier(8, timeout=5)  # two rounds of 4: broken unless all 8 build
    calls = [0]
    lock = threading.Lock()

    def on_call(names):
        with lock:
            calls[0] += 1
            first = calls[0] <= 8
        if first:
            first_rounds.wait()

    compiler = RecordingCompiler(on_call)
    c = campaign(table, executor=TableGpu(table), shapes=APART, compiler=compiler)
    c.compile_jobs = 8
    results = c.run()
    assert [len(r.records) for r in results] == [12, 12]
    assert all(len(call) == 1 for call in compiler.calls)  # a build per config
    assert len(compiler.calls) == 24  # each built once
    assert c.throughput()["compiles"]["batches"] == 1 + 4  # the first rounds, then one by one


def test_a_shapes_next_round_builds_while_the_gpu_runs_another_shapes_round(table):
    later_rounds: set[str] = set()
    later_build_started = threading.Event()

    def on_call(names):
        if later_rounds & set(names):
            later_build_started.set()

    def before_execute(index, problem):
        if index == 1:  # the second round on the GPU runs only once a later round builds
            assert later_build_started.wait(5), "nothing was built while the GPU ran"

    compiler = RecordingCompiler(on_call)
    gpu = TableGpu(table, before_execute)
    c = campaign(table, executor=gpu, shapes=APART, compiler=compiler)
    c.compile_jobs = 4
    propose = c.round.propose

    def recording_propose(problem, space, history, *, round_no, **kwargs):
        batch = propose(problem, space, history, round_no=round_no, **kwargs)
        if round_no > 0:
            later_rounds.update(p.config.name for p in batch)
        return batch

    c.round.propose = recording_propose
    results = c.run()
    assert [len(r.records) for r in results] == [12, 12]
    assert {key for key, _ in gpu.calls[:2]} == {p.key for p in APART}


def test_a_build_error_reaches_the_campaign(table):
    def on_call(names):
        raise RuntimeError("the compiler crashed")

    c = campaign(table, executor=TableGpu(table), compiler=RecordingCompiler(on_call))
    with pytest.raises(RuntimeError, match="the compiler crashed"):
        c.run()


def test_each_shape_stops_by_its_own_rules(table):
    small = SHAPES[0]

    def space_for(problem):
        configs = table.configs_for(problem)
        return SearchSpace.from_configs(problem, configs[:6] if problem == small else configs)

    c = campaign(table, executor=TableGpu(table), shapes=SHAPES[:2])
    c.space_for = space_for
    exhausted, budget = c.run()
    assert (exhausted.stopped, len(exhausted.records)) == ("exhausted", 6)
    assert (budget.stopped, len(budget.records)) == ("budget", 12)
    assert c.storage.problem_status("c", small.key) == "exhausted"


def test_patience_stops_the_shape_that_no_longer_improves_and_not_the_others(table):
    improving = SHAPES[1]

    class Gpu(TableGpu):
        def execute(self, problem, batch):
            self.calls.append((problem.key, [c.name for c in batch]))
            rounds = sum(key == problem.key for key, _ in self.calls)
            seconds = 1e-3 / rounds if problem == improving else 1e-3
            base = {"cublaslt_autotune": 1e-3}
            return [Outcome(c.name, "ok", seconds=seconds, baselines=base) for c in batch]

    c = campaign(table, executor=Gpu(table), shapes=SHAPES[:2], patience=1, budget=16)
    flat, better = c.run()
    assert (flat.stopped, len(flat.records)) == ("no_improvement", 8)
    assert (better.stopped, len(better.records)) == ("budget", 16)


def test_the_gpu_seconds_budget_stops_every_shape_after_the_rounds_proposed(table):
    executor = ReplayExecutor(table, gpu_seconds_per_candidate=10.0)
    c = campaign(table, executor=executor, shapes=SHAPES[:2], gpu_seconds=35)
    results = c.run()
    # both first rounds were proposed before any ran; none after 80 s
    assert [(r.stopped, len(r.records)) for r in results] == [("gpu_budget", 4)] * 2


def test_an_interrupted_campaign_of_several_shapes_resumes_without_running_anything_twice(
    table, tmp_path
):
    gpu = TableGpu(table)
    db = tmp_path / "c.sqlite"
    seen = []

    def interrupt_after_six(record):
        seen.append(record)
        if len(seen) == 6:
            raise KeyboardInterrupt

    first = campaign(table, executor=gpu, storage=SqliteStorage(db))
    first.after_record = interrupt_after_six
    with pytest.raises(KeyboardInterrupt):
        first.run()
    results = campaign(table, executor=gpu, storage=SqliteStorage(db)).run()
    assert [(r.stopped, len(r.records)) for r in results] == [("budget", 12)] * 3
    assert set(gpu.replay.executed.values()) == {1}
    assert len(gpu.replay.executed) == 36


class StepClock:
    """A clock that moves only when told (the GPU's rounds move it)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_run_says_its_wall_time_gpu_share_first_verified_kernel_and_pace(table):
    clock = StepClock()

    def one_second_on_the_gpu(index, problem):
        clock.now += 1.0

    compiler = RecordingCompiler()
    gpu = TableGpu(table, one_second_on_the_gpu)
    c = campaign(table, executor=gpu, compiler=compiler, pipeline=False)
    c.clock = clock
    results = c.run()
    times = c.throughput()
    assert len(gpu.calls) == 9
    assert times["search_seconds"] == times["gpu_busy_seconds"] == 9.0
    assert times["gpu_busy_fraction"] == 1.0
    assert times["first_verified_seconds"] == 1.0
    assert times["candidates"] == 36
    assert times["candidates_per_wall_hour"] == 36 / 9 * 3600
    compiles = times["compiles"]
    assert compiles["built"] == sum(len(call) for call in compiler.calls)
    assert (compiles["batches"], compiles["cached"], compiles["background"]) == (3, 0, False)
    assert compiles["build_seconds"] == 2.0 * compiles["built"]
    report = campaign_report(results, c.settings, throughput=times)
    assert report["throughput"] == times
    assert "throughput" not in campaign_report(results, c.settings)


def test_a_campaigns_background_builds_go_through_the_compile_cache(table, tmp_path):
    """compile_configs with a stand-in nvcc: the first campaign builds each config once, the
    same campaign again (a fresh database) finds every build in the cache."""
    from engine.compilation.compile import compile_configs
    from tests.engine.compile_fakes import fake_nvcc, machine

    engine_config = machine(tmp_path, fake_nvcc(tmp_path))

    def compiler(configs):
        return compile_configs(configs, config=engine_config, target_arch="sm_90")

    counts = []
    for run in ("first", "again"):
        storage = SqliteStorage(tmp_path / f"{run}.sqlite")
        c = campaign(table, executor=TableGpu(table), storage=storage, compiler=compiler)
        c.compile_jobs = 4
        results = c.run()
        assert [len(r.records) for r in results] == [12, 12, 12]
        assert all(r.status == "ok" for result in results for r in result.records)
        names = {r.name for result in results for r in result.records}
        counts.append(c.throughput()["compiles"])
        assert counts[-1]["built"] + counts[-1]["cached"] == len(names)
    first, again = counts
    assert first["built"] > 0
    assert (again["built"], again["cached"]) == (0, first["built"] + first["cached"])


def test_a_pipelined_campaign_proposes_what_an_unpipelined_one_does_whatever_its_builds_take(
    table,
):
    """The GPU takes the rounds in the order they were proposed: the first shape's slow builds
    (held until the second shape's first round is built) change nothing the policy learns."""
    from engine.propose.policy import InMemoryLearner, Policy

    second_shape_built = threading.Event()
    second_builds = [0]
    lock = threading.Lock()

    def on_call(names):
        (name,) = names if len(names) == 1 else (None,)
        if name is None:  # unpipelined: one call per wave
            return
        if "nn" in name.split("_"):  # the second shape's layout
            with lock:
                second_builds[0] += 1
                if second_builds[0] == 4:
                    second_shape_built.set()
        elif not second_shape_built.is_set():
            assert second_shape_built.wait(5)

    mix = {"rl": 0.5, "evolve": 0.25, "random": 0.25}
    proposed = []
    for pipeline in (True, False):
        policy = Policy(["sm90", "sm80"])
        c = Campaign(
            APART,
            settings=CampaignSettings(
                name="c", budget=12, batch_size=4, mix=mix, seed=3, pipeline=pipeline
            ),
            executor=TableGpu(table),
            storage=SqliteStorage(":memory:"),
            proposers=make_proposers(mix, policy=policy),
            space_for=lambda p: SearchSpace.from_configs(p, table.configs_for(p)),
            policy=policy,
            learner=InMemoryLearner(policy),
            compiler=RecordingCompiler(on_call),
            compile_jobs=8,
        )
        results = c.run()
        proposed.append([[(r.round, r.name, r.proposer) for r in res.records] for res in results])
        assert c.throughput()["compiles"]["background"] is pipeline
    assert second_shape_built.is_set()
    assert proposed[0] == proposed[1]
    assert {proposer for _, _, proposer in proposed[0][0]} == set(mix)
