"""``python -m engine optimize``: a campaign over shapes, resumable from its SQLite file.

Ctrl-C stops it; the same command again resumes where it stopped (stored candidates are never
run again). ``--replay FILE`` answers from recorded measurements instead of the GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.campaign.loop import (
    Campaign,
    CampaignSettings,
    ProblemResult,
    Progress,
    campaign_report,
    compile_configs,
)
from engine.campaign.round import MAX_BATCH, batch_size_for
from engine.campaign.storage import SqliteStorage, default_campaign_name
from engine.codegen import FAMILIES
from engine.commands.common import torch_baselines
from engine.compilation.compile import BUILD_SECONDS, build_seconds_prior, config_keys, try_load
from engine.compilation.toolkit import CompileSetupError
from engine.config import VerifyWarm
from engine.config import load as load_config
from engine.execution.executor import LocalGpuExecutor, ReplayExecutor, ReplayTable
from engine.execution.final import (
    SavedFinals,
    final_choice,
    final_measurements,
    no_choice_reason,
    sanitize_library,
)
from engine.gpu import environment
from engine.llm.backends import BackendSpec, make_backend
from engine.llm.evaluate import SourceCompiler
from engine.llm.proposer import LLMProposer
from engine.outcomes import CandidateRecord
from engine.problem import Layout, Problem, ProblemError
from engine.propose.mirror import MirrorFileError, load_targets, with_exact_mirrors
from engine.propose.mix import DEFAULT_MIX, INPUT_PROPOSER_NAMES, PROPOSER_NAMES, make_proposers
from engine.propose.policy import (
    InMemoryLearner,
    Policy,
    PolicyFile,
    policy_families,
    policy_path,
    pretrained_path,
)
from engine.propose.space import SearchSpace, families_for_arch
from engine.publish.bundle.buckets import expand_shapes
from engine.timing.baseline_names import TORCH_TUNED
from engine.timing.protocol_names import DEFAULT_PROTOCOL, PROTOCOLS

CLI_PROPOSERS = (*PROPOSER_NAMES, *INPUT_PROPOSER_NAMES, "llm")

# Called after each stored candidate; tests use it to interrupt a campaign part-way.
after_record_hook: Callable[[CandidateRecord], None] | None = None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "optimize", help="search kernels for shapes (resumable campaign, live progress)"
    )
    parser.add_argument(
        "--shapes",
        required=True,
        help="comma-separated MxNxK shapes; M=lo..hi:NxK is NxK at every power-of-two M in "
        "[lo, hi] and at lo and hi (for a dynamic-M bundle), e.g. M=1..8192:4096x4096",
    )
    parser.add_argument("--layout", default="tn", choices=[x.value for x in Layout])
    parser.add_argument("--budget", type=int, default=64, help="candidates per shape")
    parser.add_argument("--gpu-seconds", type=float, help="GPU-seconds budget for the campaign")
    parser.add_argument(
        "--batch",
        type=int,
        help="candidates per round (default: the budget over 4 rounds, at most 8; the dashboard's "
        "campaigns choose the same)",
    )
    parser.add_argument(
        "--protocol",
        default=DEFAULT_PROTOCOL,
        choices=PROTOCOLS,
        help="the timing protocol the GPU steps time and the reward uses (replay: device only)",
    )
    parser.add_argument(
        "--no-pipeline",
        action="store_true",
        help="GPU runs: build each wave of rounds once the GPU has run the one before (the same "
        "candidates) instead of building a shape's next round while the GPU runs the others'",
    )
    parser.add_argument(
        "--proposers",
        help=f"from {','.join(CLI_PROPOSERS)}, at equal weights (default: the engine's mix, "
        f"{','.join(f'{n}={w:g}' for n, w in DEFAULT_MIX.items())})",
    )
    parser.add_argument("--mix", help="weights, e.g. rl=0.5,evolve=0.3,random=0.2")
    parser.add_argument(
        "--cublaslt-kernels",
        type=Path,
        action="append",
        help="--proposers mirror (and the llm's prompts): the kernels cuBLASLt runs per problem "
        "(bench/cublaslt_kernels.py JSON, or a campaign's results JSON whose finals recorded "
        "them); repeat it to merge files",
    )
    llm = parser.add_argument_group("LLM proposer (--proposers llm; GPU runs only)")
    llm.add_argument("--llm-backend", choices=("local", "openai"), default="local")
    llm.add_argument("--llm-model", help="local: path, hub id or checkpoint; openai: model name")
    llm.add_argument("--llm-base-url", help="OpenAI-compatible server, e.g. http://host:8000/v1")
    llm.add_argument("--llm-device", default="cpu", help="local models: cpu or cuda")
    llm.add_argument("--llm-max-tokens", type=int, default=2048)
    llm.add_argument("--llm-turns", type=int, default=3, help="repair turns per candidate")
    parser.add_argument("--baseline", default="cublaslt_autotune")
    parser.add_argument("--patience", type=int, help="stop a shape after N rounds without gain")
    parser.add_argument("--min-entropy", type=float, help="stop when the policy converged")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", help="campaign name (default: from layout and shapes)")
    parser.add_argument("--db", type=Path, help="SQLite file (default: cache dir)")
    parser.add_argument("--replay", type=Path, action="append", help="recorded table(s)")
    parser.add_argument("--policy", type=Path, help="policy file (default: cache dir, per arch)")
    parser.add_argument("--no-save-policy", action="store_true")
    parser.add_argument(
        "--pretrain",
        type=Path,
        action="append",
        help="recorded table(s) to train the policy on before the campaign starts",
    )
    parser.add_argument("--pretrain-steps", type=int, default=200)
    parser.add_argument(
        "--space",
        default="library",
        choices=("full", "library"),
        help="library (default): the curated configs of engine/codegen/library.py that `engine "
        "prebuild --library` builds once; full: every valid config of the GPU's families, most "
        "of them compiled during the campaign (GPU runs; a replay searches its table's configs)",
    )
    parser.add_argument(
        "--families",
        help="kernel families to search, comma separated (default: the GPU's, "
        "engine.propose.space.families_for_arch; e.g. triton alone)",
    )
    parser.add_argument("--jobs", type=int, help="parallel nvcc processes")
    parser.add_argument(
        "--device-seconds",
        type=float,
        default=20.0,
        help="cap on one batch's device-protocol timing run (GPU runs)",
    )
    parser.add_argument(
        "--heat-seconds", type=float, default=1.0, help="GPU heat-up before each batch's timing"
    )
    parser.add_argument(
        "--verify-jobs",
        type=int,
        help="verifications at once, each its own process (default: the round's candidates, "
        f"at most {MAX_BATCH})",
    )
    parser.add_argument("--out", type=Path, help="results JSON (default: beside the db)")
    parser.add_argument(
        "--final-top",
        type=int,
        default=3,
        help="GPU runs: re-measure each shape's top N in a fresh process in every protocol, "
        "sanitized in rank order until N pass (at most 3N tried; 0: skip)",
    )
    parser.add_argument("--final-device-seconds", type=float, default=20.0)
    parser.add_argument(
        "--final-torch-baselines",
        default=",".join(TORCH_TUNED),
        help="torch-tuned baselines the finals time too, comma separated; '' for none",
    )
    parser.add_argument(
        "--no-sanitize",
        action="store_true",
        help="skip compute-sanitizer on the top kernels (by default one that fails is dropped "
        "and the next in rank order tried)",
    )
    parser.set_defaults(func=run)


def chosen_families(args: argparse.Namespace, arch: str) -> tuple[str, ...]:
    """--families (each a known family), or the arch's own."""
    if not getattr(args, "families", None):
        return families_for_arch(arch)
    chosen = tuple(f.strip() for f in args.families.split(",") if f.strip())
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown or not chosen:
        raise SystemExit(f"error: --families: unknown {unknown}; known {sorted(FAMILIES)}")
    return chosen


def parse_mix(proposers: str | None, mix: str | None) -> dict[str, float]:
    if not mix and proposers is None:
        return dict(DEFAULT_MIX)
    if mix:
        out = {}
        for part in mix.split(","):
            name, _, weight = part.partition("=")
            try:
                out[name.strip()] = float(weight)
            except ValueError:
                raise SystemExit(f"error: cannot read --mix part {part!r}") from None
    else:
        names = [p.strip() for p in (proposers or "").split(",") if p.strip()]
        out = {name: 1.0 / len(names) for name in names} if names else {}
    unknown = sorted(set(out) - set(CLI_PROPOSERS))
    if unknown or not out:
        raise SystemExit(f"error: proposers must be from {list(CLI_PROPOSERS)}, got {unknown}")
    return out


def mirror_targets(args: argparse.Namespace, problems: list[Problem]) -> dict[str, Any]:
    """cuBLASLt's kernels per problem for the mirror proposer, from --cublaslt-kernels."""
    if args.cublaslt_kernels is None:
        if args.replay:
            raise SystemExit(
                "error: --proposers mirror needs --cublaslt-kernels FILE with --replay "
                "(a replayed campaign measures no cuBLASLt kernel to learn from)"
            )
        print("mirror: learns cuBLASLt's kernels from each problem's GPU steps", flush=True)
        return {}
    try:
        targets = load_targets(*args.cublaslt_kernels)
    except MirrorFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    named = sum(p.key in targets for p in problems)
    print(f"mirror: cuBLASLt's kernels for {named} of {len(problems)} problems", flush=True)
    return targets


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        layout = Layout.parse(args.layout)
        problems = [Problem.parse(s, layout) for s in expand_shapes(args.shapes)]
    except ProblemError as exc:
        raise SystemExit(f"error: {exc}") from None
    if not problems:
        raise SystemExit("error: --shapes names no shape")
    mix = parse_mix(args.proposers, args.mix)
    wants_kernels = "mirror" in mix or (args.cublaslt_kernels and ("llm" in mix or "seed" in mix))
    targets = mirror_targets(args, problems) if wants_kernels else None
    config = load_config()
    name = args.name or default_campaign_name(problems, replay=bool(args.replay))
    try:
        settings = CampaignSettings(
            name=name,
            budget=args.budget,
            gpu_seconds=args.gpu_seconds,
            batch_size=args.batch or batch_size_for(args.budget),
            mix=mix,
            baseline=args.baseline,
            patience=args.patience,
            min_entropy=args.min_entropy,
            seed=args.seed,
            pipeline=not args.no_pipeline,
            protocol=args.protocol,
        )
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    if "llm" in mix and args.replay:
        raise SystemExit("error: the llm proposer writes new sources: it needs a GPU run")
    if "llm" in mix and not (args.llm_model or args.llm_base_url):
        raise SystemExit("error: --proposers llm needs --llm-model (and --llm-base-url for openai)")
    if args.replay and args.protocol != "device":
        raise SystemExit("error: the replay tables hold device-protocol times only")
    if args.replay:
        for path in args.replay:
            if not path.is_file():
                raise SystemExit(f"error: no such replay table: {path}")
        table = ReplayTable.load(args.replay)
        executor: ReplayExecutor | LocalGpuExecutor = ReplayExecutor(table)

        def space_for(problem: Problem) -> SearchSpace:
            if problem.key not in table.seconds:
                raise SystemExit(f"error: the replay table has no {problem.key}")
            return SearchSpace.from_configs(problem, table.configs_for(problem))

    else:
        executor = LocalGpuExecutor(
            protocols=(args.protocol,),
            verify_jobs=args.verify_jobs or min(settings.batch, MAX_BATCH),
            device_seconds=args.device_seconds,
            heat_seconds=args.heat_seconds,
        )
        families = chosen_families(args, executor.arch)

        if args.space == "library":

            def space_for(problem: Problem) -> SearchSpace:
                space = SearchSpace.library(problem, families=families)
                if not targets or "sm90" not in families:
                    return space
                # the exact copies of cuBLASLt's kernels join the library (built on demand)
                return with_exact_mirrors(space, targets.get(problem.key, ()))

        else:

            def space_for(problem: Problem) -> SearchSpace:
                return SearchSpace.full(problem, families=families)

    families = chosen_families(args, executor.arch)
    policy = None
    learner: PolicyFile | InMemoryLearner | None = None
    if "rl" in mix:
        path = args.policy or policy_path(config.cache_dir, executor.arch)
        shared = PolicyFile(
            path, policy_families(executor.arch, families), start=pretrained_path(executor.arch)
        )
        policy = shared.policy
        origin = {
            "file": f"{path} ({policy.updates} updates, space {policy.space_id})",
            "pretrained": f"the shipped pretrained policy for {executor.arch}",
            "fresh": "fresh",
        }[shared.origin]
        saved_to = "not saved" if args.no_save_policy else f"saved to {path} after each round"
        print(f"policy: {origin}; {saved_to}", flush=True)
        if args.pretrain:
            pretrain(policy, args.pretrain, baseline=args.baseline, steps=args.pretrain_steps)
            if not args.no_save_policy:
                policy.save(path)
        learner = InMemoryLearner(policy) if args.no_save_policy else shared
    db = args.db or config.cache_dir / "campaigns.sqlite"
    storage = SqliteStorage(db)
    print(
        f"campaign {name}: {len(problems)} shapes × {args.budget} candidates, mix {mix}, "
        f"{'replay ' + ','.join(map(str, args.replay)) if args.replay else 'GPU ' + executor.arch}"
        f", db {db}",
        flush=True,
    )
    if getattr(executor, "mps", "off") != "off":  # ENGINE_VERIFY_MPS=on: say whether it is
        print(f"verification under MPS: {executor.mps}", flush=True)
    if isinstance(executor, LocalGpuExecutor) and config.verify_warm != VerifyWarm.OFF:
        print(
            f"warm verifiers ({config.verify_warm}): each batch's are forked while the batch "
            "before is timed",
            flush=True,
        )

    def compile_family(configs):
        return compile_configs(configs, jobs=args.jobs, config=config, target_arch=executor.arch)

    known = storage.measured() if "transfer" in mix else []
    if "transfer" in mix:
        print(f"transfer: {len(known)} measured candidates in {db}", flush=True)
    proposers = make_proposers(
        {k: v for k, v in mix.items() if k != "llm"},
        policy=policy,
        known=known,
        mirror_targets=targets,
    )
    compiler = compile_family
    if "llm" in mix:
        proposers["llm"], compiler = llm_proposer(args, compile_family, targets)
    campaign = Campaign(
        problems,
        settings=settings,
        executor=executor,
        storage=storage,
        proposers=proposers,
        space_for=space_for,
        policy=policy,
        learner=learner,
        compiler=compiler,
        progress=print_progress,
        after_record=after_record_hook,
        compile_jobs=args.jobs,
        before_first_builds=lambda configs: print_first_builds(
            configs, jobs=args.jobs or config.compile_jobs, config=config, arch=executor.arch
        ),
    )
    try:
        results = campaign.run()
    except KeyboardInterrupt:
        print(f"stopped; run the same command again to resume campaign {name}", file=sys.stderr)
        raise
    finally:
        storage.close()
    search = campaign.throughput()
    setup_seconds = campaign.started - started
    report = campaign_report(
        results,
        settings,
        executor=type(executor).__name__,
        throughput=felt_times(search, setup_seconds=setup_seconds),
    )
    out = args.out or Path(db).with_name(f"{name}.json")
    write_report(out, report)  # before the finals: what the search found is kept whatever follows
    without_final: list[str] = []
    finals_started = time.monotonic()
    finals_run = isinstance(executor, LocalGpuExecutor) and args.final_top > 0
    if finals_run:
        report["final"] = final_measurements(
            results,
            baseline=settings.baseline,
            top=args.final_top,
            compile=lambda configs: compile_configs(
                configs, jobs=args.jobs, config=config, target_arch=executor.arch
            ),
            device_seconds=args.final_device_seconds,
            sanitizer=None if args.no_sanitize else sanitize_library,
            progress=lambda msg: print(msg, flush=True),
            saved=SavedFinals(Path(db).with_suffix(".finals.json")),
            extra_baselines=torch_baselines(args.final_torch_baselines),
            gpu_name=environment.gpu_model(),
        )
        without_final = with_final_choices(report, results, settings.baseline)
    report["throughput"] = felt_times(
        search,
        setup_seconds=setup_seconds,
        final_seconds=time.monotonic() - finals_started if finals_run else None,
        wall_seconds=time.monotonic() - started,
    )
    write_report(out, report)
    if finals_run:
        print_finals(report["final"], settings.baseline)
    for entry in report["problems"]:
        print(summary_line(entry, settings.baseline))
    for line in throughput_lines(report["throughput"]):
        print(line)
    print(f"results: {out}")
    if without_final:
        print(
            f"error: {len(without_final)} of {len(report['problems'])} shapes have no final "
            f"kernel: {', '.join(without_final)}",
            file=sys.stderr,
        )
        return 1
    return 0


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=1))
    partial.replace(path)


def with_final_choices(
    report: dict[str, Any], results: Sequence[ProblemResult], baseline: str
) -> list[str]:
    """Makes each problem's ``best`` the finals' choice (engine.execution.final.final_choice),
    the search's own kept as ``search_best``; a problem without a final gets ``best`` None and
    the reason as ``final_error``. Returns the keys of the problems without a final."""
    records = {r.problem.key: {c.name: c for c in r.records} for r in results}
    finals = report.get("final", {})
    missing = []
    for entry in report["problems"]:
        key = entry["problem"]
        entry["search_best"] = entry["best"]
        entry["search_best_speedups"] = entry["best_speedups"]
        final = finals.get(key) or {"error": "not re-measured"}
        choice = final_choice(final)
        if choice is None:
            reason = no_choice_reason(final)
            entry.update(best=None, best_knobs=None, best_speedups={}, final_error=reason)
            missing.append(key)
            continue
        kernel, protocol = choice
        speedups = {
            p: dict(summary["speedups"][kernel])
            for p, summary in final["protocols"].items()
            if kernel in summary.get("speedups", {})
        }
        record = records.get(key, {}).get(kernel)
        entry.update(
            best=kernel,
            best_knobs=dict(record.knobs) if record is not None else None,
            best_speedups=speedups[protocol],
            best_from=f"final ({protocol})",
            final_speedups=speedups,
        )
    return missing


def uncached_configs(configs: Sequence[Any], *, config: Any, arch: str) -> list[Any] | None:
    """The family ``configs`` the kernel cache lacks (None: no toolchain to ask)."""
    family_configs = [c for c in configs if c.FAMILY in FAMILIES]
    try:
        keys = config_keys(family_configs, config=config, target_arch=arch)
    except CompileSetupError:
        return None
    return [c for c, key in zip(family_configs, keys, strict=True) if try_load(key, config) is None]


def uncached(configs: Sequence[Any], *, config: Any, arch: str) -> int | None:
    """How many of the family ``configs`` the kernel cache lacks (None: no toolchain to ask)."""
    missing = uncached_configs(configs, config=config, arch=arch)
    return None if missing is None else len(missing)


def first_builds_estimate(missing: Sequence[Any], total: int, *, jobs: int) -> str:
    """What building the first rounds' ``missing`` configs will take on ``jobs`` cores: each
    family's build time on one core (engine.compilation.compile.build_seconds_prior), the
    longest first, each on the job that frees first."""
    jobs = max(1, jobs)
    loads = [0.0] * jobs
    for seconds in sorted((build_seconds_prior(c.FAMILY) for c in missing), reverse=True):
        loads[loads.index(min(loads))] += seconds
    seconds = max(loads)
    return (
        f"compiles: {len(missing)} of the first rounds' {total} configs are not in the kernel "
        f"cache: about {_clock(seconds)} on {jobs} jobs before the GPU starts (a CUTLASS build "
        f"takes about {BUILD_SECONDS:.0f} s of a core, a longk or Triton one a few), and later "
        "rounds' builds alike while the GPU runs; `engine prebuild --library` builds the library "
        "once"
    )


def print_first_builds(configs: Sequence[Any], *, jobs: int, config: Any, arch: str) -> None:
    missing = uncached_configs(configs, config=config, arch=arch)
    if missing:
        print(first_builds_estimate(missing, len(configs), jobs=jobs), flush=True)


def felt_times(
    search: dict[str, Any],
    *,
    setup_seconds: float,
    final_seconds: float | None = None,
    wall_seconds: float | None = None,
) -> dict[str, Any]:
    """The search's numbers (engine.campaign.loop.Campaign.throughput) as the command's user felt
    them: times from the command's start, the finals' time, and the whole wall time once known
    (``to_final_seconds``: when the finals' choice was written, the search's end without
    finals)."""
    first = search.get("first_verified_seconds")
    out = dict(search)
    out.update(
        setup_seconds=round(setup_seconds, 3),
        first_verified_seconds=None if first is None else round(setup_seconds + first, 3),
        final_seconds=None if final_seconds is None else round(final_seconds, 3),
        wall_seconds=None if wall_seconds is None else round(wall_seconds, 3),
        to_final_seconds=None if wall_seconds is None else round(wall_seconds, 3),
    )
    return out


def throughput_lines(times: dict[str, Any]) -> list[str]:
    """Where the wall time went, for the summary."""
    wall, search = times.get("wall_seconds") or 0.0, times["search_seconds"]
    parts = [f"setup {times['setup_seconds']:.0f} s", f"search {search:.0f} s"]
    if times.get("final_seconds") is not None:
        parts.append(f"finals {times['final_seconds']:.0f} s")
    busy = times.get("gpu_busy_fraction")
    busy_text = "-" if busy is None else f"{busy:.0%}"
    first = times.get("first_verified_seconds")
    rate = times.get("candidates_per_wall_hour")
    lines = [
        f"time: {wall:.0f} s wall ({', '.join(parts)}); GPU busy {busy_text} of the search "
        f"({times['gpu_busy_seconds']:.0f} s)",
        f"first verified kernel after {'-' if first is None else f'{first:.0f} s'}, final after "
        f"{wall:.0f} s; {times['candidates']} candidates, "
        f"{'-' if rate is None else f'{rate:.0f}'} per wall-hour",
    ]
    compiles = times.get("compiles") or {}
    if compiles.get("built") or compiles.get("cached"):
        waited, batches = compiles["gpu_waited_seconds"], compiles["batches"]
        lines.append(
            f"compiles: {compiles['built']} built ({compiles['build_seconds']:.0f} s of compiler "
            f"time in {batches} batch{'es' if batches != 1 else ''}, "
            f"{compiles['wall_seconds']:.0f} s of wall), "
            f"{compiles['cached']} from the cache; the GPU waited {waited:.0f} s for builds"
        )
    return lines


def summary_line(entry: dict[str, Any], baseline: str) -> str:
    head = f"{entry['problem']}: {entry['candidates']} candidates ({entry['stopped']})"
    if "final_error" in entry:
        return f"{head}, no final: {entry['final_error']}"
    speedup = entry["best_speedups"].get(baseline, 0.0)
    source = entry.get("best_from", "search")
    return f"{head}, best {speedup:.3f}x {baseline} ({source}): {entry['best']}"


def llm_proposer(args: argparse.Namespace, compile_family, cublaslt_kernels=None):
    """(LLMProposer, its SourceCompiler) for the backend the arguments name; its prompts say
    what cuBLASLt runs on each problem where ``cublaslt_kernels`` knows it."""

    spec = BackendSpec(
        kind=args.llm_backend,
        model=args.llm_model or "",
        base_url=args.llm_base_url or "",
        device=args.llm_device,
        generation={"max_new_tokens": args.llm_max_tokens},
    )
    try:
        backend = make_backend(spec)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: cannot load the LLM backend: {exc}") from None
    compiler = SourceCompiler(family_compiler=compile_family, jobs=args.jobs)
    proposer = LLMProposer(
        backend, compiler=compiler, max_turns=args.llm_turns, cublaslt_kernels=cublaslt_kernels
    )
    print(f"llm: {spec.kind} backend {spec.model or spec.base_url}", flush=True)
    return proposer, compiler


def pretrain(policy: Policy, tables: list[Path], *, baseline: str, steps: int) -> None:
    """Trains ``policy`` on the recorded rewards of every problem in ``tables``."""
    missing = [str(p) for p in tables if not p.is_file()]
    if missing:
        raise SystemExit(f"error: no such pretraining table: {', '.join(missing)}")
    table = ReplayTable.load(tables)
    tasks = []
    for problem in table.problems():
        space = SearchSpace.from_configs(problem, table.configs_for(problem))
        rewards = {n: math.log(s) for n, s in table.speedups(problem, baseline).items() if s > 0}
        if len(space) and rewards:
            tasks.append((problem, space, rewards))
    policy.pretrain(tasks, steps=steps)
    print(f"policy: pretrained on {len(tasks)} recorded problems ({steps} steps)", flush=True)


def print_finals(finals: dict, baseline: str) -> None:
    """Each shape's final: the kernel it chose and that kernel's speedup in every protocol."""
    for key, final in finals.items():
        choice = final_choice(final)
        if choice is None:
            print(f"{key}: no final: {no_choice_reason(final)}")
            continue
        kernel, _ = choice
        parts = [
            f"{protocol} {summary['speedups'][kernel].get(baseline, 0.0):.3f}x"
            for protocol, summary in final["protocols"].items()
            if kernel in summary.get("speedups", {})
        ]
        print(f"{key}: final {kernel} vs {baseline}: {', '.join(parts)}")


def print_progress(p: Progress) -> None:
    order = ("cublaslt_autotune", "cublaslt_heuristic", "cublas", "torch")
    best = " ".join(f"{p.best[b]:.3f}x {b}" for b in order if b in p.best) or "none yet"
    eta = "-" if p.eta is None else _clock(p.eta)
    share = p.campaign_done / p.campaign_total if p.campaign_total else 0.0
    print(
        f"[{p.campaign_done:4d}/{p.campaign_total} {share:4.0%}] {p.problem.key}: "
        f"{p.done}/{p.budget} done, {p.failed} failed | best {best} | ETA {eta}",
        flush=True,
    )


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
