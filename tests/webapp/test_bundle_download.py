"""The dashboard's bundle.zip is `engine bundle`'s: the same builder (engine.publish.bundle) over
the same campaign, imported with its finals. A campaign database with four shapes:

- SQUARE: the best kernel failed compute-sanitizer in the finals, the second passed;
- SKINNY: the finals rejected the best kernel while timed (unwritten C), the second passed;
- WIDE: the finals' error, "no top kernel passed": its only top kernel failed the sanitizer;
- WRITTEN: a model-written kernel (engine.llm, with its source), sanitized.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from engine.cli import main as engine_main
from engine.codegen.triton import TritonConfig
from engine.commands.bundle_command import kernel_config
from engine.compilation import triton_aot
from engine.compilation.compile import source_hash
from engine.execution.final import SavedFinals, final_settings, kernel_id
from engine.outcomes import CandidateRecord
from engine.problem import Problem as EngineProblem
from engine.publish.bundle import CUBLASLT, kernel_from_record
from engine.timing.cublaslt_kernels import CONFIG_ATTRIBUTES
from engine.verify.sanitize import verdict_key
from tests.campaign_dbs import write_campaign
from tests.webapp.test_import_campaign_database import BASELINES, ENVIRONMENT, library_configs, ok
from webapp.campaigns.models import Campaign, Candidate

pytestmark = pytest.mark.django_db

NAME = "finals"
FINAL_SETTINGS = final_settings(("device",), 1.0, ())
SQUARE = EngineProblem.parse("1024x1024x1024", "nn")
SKINNY = EngineProblem.parse("256x4096x1024", "nn")
WIDE = EngineProblem.parse("2048x2048x2048", "nn")
WRITTEN = EngineProblem.parse("512x512x512", "nn")
FASTER = {b: 2 * t for b, t in BASELINES.items()}  # every kernel here beats every baseline
PASSED = {"ok": True, "reason": "ok", "message": "", "problem": "264x272x1032"}
FAILED = {"ok": False, "reason": "memcheck", "message": "1 error", "problem": "264x272x1032"}
UNWRITTEN = {"reason": "unwritten", "message": "8 of 9 checked timed calls failed"}


def timed(config, seconds: float) -> CandidateRecord:
    """A verified config whose search session beats every baseline."""
    return replace(ok(config, seconds), baselines=FASTER)


def model_written() -> CandidateRecord:
    return CandidateRecord(
        name="llm_5eed", family="llm", knobs={}, proposer="llm", status="ok", reward=0.1,
        seconds=1.0e-5, baselines=FASTER, timings={"device": {"seconds": 1.0e-5}},
        source='#include "gemmforge_abi.h"\n// a model wrote this\n',
    )  # fmt: skip


def final(kernels: dict[str, float], sanitize: dict, rejected: str | None = None) -> dict:
    """A shape's final summary (engine.execution.final.final_summary)."""
    seconds = {f"{b}_{v}": 2 * t for b, t in BASELINES.items() for v in ("nn", "tn")}
    device = {
        "statistic": "median",
        "seconds": {**seconds, **kernels},
        "rejected_while_timed": [rejected] if rejected else [],
        "rejections": {rejected: UNWRITTEN} if rejected else {},
    }
    return {"protocols": {"device": device}, "environment": ENVIRONMENT, "sanitize": sanitize}


@pytest.fixture
def engine_db(tmp_path) -> Path:
    """The campaign database, its finals file (engine bundle's) and its --out report (the
    dashboard import's), as engine optimize leaves them."""
    path = tmp_path / "run" / "campaign.sqlite"
    records = {
        SQUARE: [
            timed(c, t)
            for c, t in zip(library_configs(SQUARE, 3), (1e-5, 1.2e-5, 1.4e-5), strict=False)
        ],
        SKINNY: [
            timed(c, t) for c, t in zip(library_configs(SKINNY, 2), (1e-5, 1.3e-5), strict=False)
        ],
        WIDE: [timed(c, 1e-5) for c in library_configs(WIDE, 1)],
        WRITTEN: [model_written()],
    }
    write_campaign(
        path,
        NAME,
        records,
        settings={"name": NAME, "budget": 3, "environment": ENVIRONMENT},
        status="budget",
    )
    square, skinny, [wide], [written] = (
        [r.name for r in records[p]] for p in (SQUARE, SKINNY, WIDE, WRITTEN)
    )
    sections = {
        SQUARE.key: final(
            {square[1]: 1.2e-5, square[2]: 1.4e-5},
            {square[0]: FAILED, square[1]: PASSED, square[2]: PASSED},
        ),
        SKINNY.key: final(
            {skinny[0]: 0.9e-5, skinny[1]: 1.3e-5},
            {skinny[0]: PASSED, skinny[1]: PASSED},
            rejected=skinny[0],
        ),
        WIDE.key: {"error": "no top kernel passed", "sanitize": {wide: FAILED}},
        WRITTEN.key: final({written: 1.0e-5}, {written: PASSED}),
    }
    (path.parent / "campaign.json").write_text(
        json.dumps({"settings": {"name": NAME, "budget": 3}, "problems": [], "final": sections})
    )
    saved = SavedFinals(path.with_suffix(".finals.json"))
    for problem, recorded in records.items():
        section = sections[problem.key]
        by_name = {r.name: r for r in recorded}
        for name, verdict in section["sanitize"].items():
            config = kernel_config(kernel_from_record(problem, by_name[name]))
            kernel = kernel_id(name, source_hash(config.render()))
            saved.add_sanitized(kernel, verdict_key(config, problem), verdict)
        if "error" not in section:
            saved.add_final(problem.key, list(section["sanitize"]), section, FINAL_SETTINGS)
    return path


def download_bytes(client, campaign: Campaign, query: str = "?slower=1") -> bytes:
    response = client.get(reverse("campaign-bundle", args=[campaign.id]) + query)
    assert response.status_code == 200, response.content[:2000]
    return b"".join(response.streaming_content)


def download(client, campaign: Campaign, query: str = "?slower=1") -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(download_bytes(client, campaign, query)))


def contents(zf: zipfile.ZipFile) -> dict[str, object]:
    """Every member, the manifests without the environment (the dashboard keeps the GPU's
    name, driver and versions; the engine's file every field it measured)."""
    out: dict[str, object] = {}
    for name in zf.namelist():
        data = zf.read(name)
        if name.endswith((".json",)):
            document = json.loads(data)
            document.pop("environment", None)
            out[name] = document
        else:
            out[name] = data.decode()
    return out


def imported(engine_db: Path) -> Campaign:
    call_command("import_results", str(engine_db), owner="alice")
    return Campaign.objects.get(name=NAME)


def test_the_dashboard_zip_is_the_engine_bundle_of_the_same_campaign(client, alice, engine_db):
    cli_zip = engine_db.parent / "cli.zip"
    argv = ["bundle", NAME, "--db", str(engine_db), "--out", str(cli_zip), "--include-slower"]
    assert engine_main(argv) == 0
    web = contents(download(client, imported(engine_db)))
    assert web == contents(zipfile.ZipFile(cli_zip))
    kernels = web[f"gemmforge-{NAME}/gemmforge_bundle/kernels.json"]["kernels"]
    chosen = {(k["m"], k["n"], k["k"]): k["name"] for k in kernels}
    assert chosen == {
        (1024, 1024, 1024): library_configs(SQUARE, 2)[1].name,  # the best failed the sanitizer
        (256, 4096, 1024): library_configs(SKINNY, 2)[1].name,  # the best rejected while timed
        (512, 512, 512): "llm_5eed",  # model-written, with its source
    }  # WIDE: its only top kernel failed the sanitizer
    readme = web[f"gemmforge-{NAME}/README.md"]
    assert "rejected in the finals: device: unwritten" in readme
    assert readme.count("no passing compute-sanitizer verdict") == 2  # SQUARE's best, WIDE's
    source = web[f"gemmforge-{NAME}/gemmforge_bundle/kernels/llm_5eed.cu"]
    assert source == model_written().source


def test_importing_keeps_the_finals_verdicts_and_a_failed_kernel_is_never_a_shapes_best(
    client, alice, engine_db
):
    campaign = imported(engine_db)
    square = campaign.problems.get(m=1024)
    failed = Candidate.objects.get(problem=square, name=library_configs(SQUARE, 1)[0].name)
    assert failed.status == Candidate.Status.REJECTED
    assert failed.verification_result["sanitize"] == FAILED
    assert failed.failure_reason == "compute-sanitizer: memcheck: 1 error"
    assert square.best["name"] == library_configs(SQUARE, 2)[1].name
    skinny = campaign.problems.get(m=256)
    rejected = Candidate.objects.get(problem=skinny, name=library_configs(SKINNY, 1)[0].name)
    assert rejected.status == Candidate.Status.REJECTED
    assert rejected.verification_result["final_rejection"].startswith("device: unwritten")
    assert skinny.best["name"] == library_configs(SKINNY, 2)[1].name
    wide = campaign.problems.get(m=2048)
    [only] = Candidate.objects.filter(problem=wide)
    assert only.verification_result["final_error"] == "no top kernel passed"
    assert only.status == Candidate.Status.REJECTED
    assert wide.best == {}
    passed = Candidate.objects.get(problem=square, name=square.best["name"])
    assert passed.verification_result["sanitize"] == PASSED
    page = client.get(reverse("campaign-detail", args=[campaign.id]))
    assert page.status_code == 200


def test_a_model_written_best_kernel_downloads_in_the_bundle(client, alice, engine_db):
    zf = download(client, imported(engine_db), query="")
    names = zf.namelist()
    assert f"gemmforge-{NAME}/gemmforge_bundle/kernels/llm_5eed.cu" in names


# -- a Triton kernel from the dashboard --------------------------------------------------------
EVENK = EngineProblem.parse("256x512x1024", "nn")


def evenk_config() -> TritonConfig:
    """An ``evenk`` Triton config valid at EVENK (K a whole number of K tiles)."""
    return next(
        c
        for c in TritonConfig.candidates(EVENK.layout)
        if c.even_k and c.splits == 1 and c.is_valid(EVENK)
    )


def one_kernel_campaign(tmp_path: Path, name: str, problem: EngineProblem, config) -> Path:
    """Campaign ``name`` (its database under tmp_path/name): one shape, its search over, one
    kernel searched at 10 µs."""
    return write_campaign(
        tmp_path / name / "campaign.sqlite",
        name,
        {problem: [timed(config, 1e-5)]},
        settings={"name": name, "environment": ENVIRONMENT},
        status="budget",
    )


def triton_campaign(tmp_path: Path) -> Path:
    """A campaign whose one shape's best is an evenk Triton config, sanitized in its finals."""
    config = evenk_config()
    path = one_kernel_campaign(tmp_path, "triton", EVENK, config)
    section = final({config.name: 1e-5}, {config.name: PASSED})
    (path.parent / "campaign.json").write_text(
        json.dumps({"settings": {"name": "triton"}, "problems": [], "final": {EVENK.key: section}})
    )
    return path


def test_a_triton_best_kernel_ships_its_cubin_not_the_header_include(
    client, alice, tmp_path, monkeypatch
):
    (tmp_path / triton_aot.HEADER_NAME).write_text("// the compiled cubin, as bytes\n")
    import types

    import engine.compilation.compile

    built = types.SimpleNamespace(ok=True, entry=tmp_path, error=None)
    monkeypatch.setattr(engine.compilation.compile, "compile_source", lambda source, **_: built)
    call_command("import_results", str(triton_campaign(tmp_path)), owner="alice")
    zf = download(client, Campaign.objects.get(name="triton"))
    shipped = zf.read(f"gemmforge-triton/gemmforge_bundle/kernels/{evenk_config().name}.cu")
    assert b"// the compiled cubin, as bytes" in shipped
    assert f'#include "{triton_aot.HEADER_NAME}"'.encode() not in shipped


def dashboard_triton_bundle(client, tmp_path: Path) -> Path:
    """The dashboard's bundle of the Triton campaign, unpacked; returns its folder."""
    from engine.publish.bundle import unpack

    call_command("import_results", str(triton_campaign(tmp_path)), owner="alice")
    out = tmp_path / "dashboard.zip"
    out.write_bytes(download_bytes(client, Campaign.objects.get(name="triton")))
    return unpack(out, tmp_path / "unpacked")


@pytest.mark.nvcc
@pytest.mark.slow
def test_the_dashboards_triton_bundle_builds_with_nvcc(client, alice, tmp_path):
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys

    root = dashboard_triton_bundle(client, tmp_path)
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "gemmforge_bundle.build", "--jobs", "2"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert list((root / "gemmforge_bundle" / "lib").glob("hgemm_triton*.so"))


RUN_TRITON_BUNDLE = """
import torch, gemmforge_bundle
from gemmforge_bundle import _ops
torch.manual_seed(0)
a = torch.randn(256, 1024, dtype=torch.float16, device="cuda")
b = torch.randn(1024, 512, dtype=torch.float16, device="cuda")
assert _ops.plan(a, b) is not None, "the Triton kernel does not serve its own shape"
got = torch.ops.gemmforge.hgemm(a, b)
ref = a.float() @ b.float()
err = float((got.float() - ref).norm() / ref.norm())
assert err < 1e-3, err
print("ok", err)
"""


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.slow
def test_the_dashboards_triton_bundle_loads_and_runs_on_the_gpu(client, alice, tmp_path):
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys

    root = dashboard_triton_bundle(client, tmp_path)
    # the caller's PYTHONPATH kept: on the GPU host it holds the carried nvidia-cutlass wheel
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    for argv in (
        ["-m", "gemmforge_bundle.build"],
        ["-m", "gemmforge_bundle.verify"],
        ["-c", RUN_TRITON_BUNDLE],
    ):
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, (argv, done.stdout[-3000:], done.stderr[-3000:])
    assert done.stdout.startswith("ok")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tn-16shapes-1c5e2593", "nn-64shapes-2bacba6c"])
def test_the_recorded_grid64_bundle_is_the_same_from_the_dashboard_and_engine_bundle(
    client, db, tmp_path, name
):
    """What `bin/run` loads (the H200 grid64 campaign, finals and sanitizer verdicts included):
    the dashboard's zip holds what `engine bundle` writes from the same files."""
    from tests.webapp.test_import_campaign_database import GRID64

    call_command("import_results", str(GRID64))
    cli_zip = tmp_path / "cli.zip"
    argv = ["bundle", name, "--db", str(GRID64), "--out", str(cli_zip), "--include-slower"]
    assert engine_main(argv) == 0
    web = contents(download(client, Campaign.objects.get(name=name)))
    assert web == contents(zipfile.ZipFile(cli_zip))
    assert web[f"gemmforge-{name}/gemmforge_bundle/kernels.json"]["kernels"]


# -- cuBLASLt's pinned algorithm -----------------------------------------------------------------
PINNED = EngineProblem.parse("512x1024x2048", "nn")
AUTOTUNE_PICK = (66, 24, 1, 0, 0, 0, 17, 0, 2)  # CONFIG_ATTRIBUTES order
CUBLASLT_KERNELS = {  # a final's cublaslt_kernels (engine.execution.final.final_summary)
    "cublaslt_autotune_nn": {
        "autotune": {
            "raw": dict(zip(CONFIG_ATTRIBUTES, AUTOTUNE_PICK, strict=True)),
            "label": "algo66 256x128x64",
        }
    }
}


def pinned_campaign(tmp_path: Path) -> Path:
    """A campaign whose one shape's kernel beat every baseline in its search but is slower than
    cuBLASLt-autotune in its final, which recorded autotune's algorithm: cuBLASLt serves it."""
    [config] = library_configs(PINNED, 1)
    path = one_kernel_campaign(tmp_path, "pinned", PINNED, config)
    # the final's cuBLASLt-autotune: 3.8e-5 s; the kernel: 5e-5 s
    section = {
        **final({config.name: 5e-5}, {config.name: PASSED}),
        "cublaslt_kernels": CUBLASLT_KERNELS,
    }
    (path.parent / "campaign.json").write_text(
        json.dumps({"settings": {"name": "pinned"}, "problems": [], "final": {PINNED.key: section}})
    )
    saved = SavedFinals(path.with_suffix(".finals.json"))
    kernel = kernel_id(config.name, source_hash(kernel_config_of(config).render()))
    saved.add_sanitized(kernel, verdict_key(kernel_config_of(config), PINNED), PASSED)
    saved.add_final(PINNED.key, [config.name], section, FINAL_SETTINGS)
    return path


def kernel_config_of(config):
    return kernel_config(kernel_from_record(PINNED, timed(config, 1e-5)))


def test_a_shape_whose_final_picked_a_cublaslt_algorithm_downloads_it_pinned(
    client, alice, tmp_path
):
    db = pinned_campaign(tmp_path)
    cli_zip = tmp_path / "cli.zip"
    assert engine_main(["bundle", "pinned", "--db", str(db), "--out", str(cli_zip)]) == 0
    call_command("import_results", str(db), owner="alice")
    web = contents(download(client, Campaign.objects.get(name="pinned"), query=""))
    manifest = web["gemmforge-pinned/gemmforge_bundle/kernels.json"]
    [entry] = manifest["kernels"]
    assert (entry["kind"], entry["algo"]) == (CUBLASLT, list(AUTOTUNE_PICK))
    assert (entry["m"], entry["n"], entry["k"]) == (PINNED.m, PINNED.n, PINNED.k)
    assert manifest["cublaslt"]["gpu_name"] == ENVIRONMENT["gpu_name"]
    assert manifest["cublaslt"]["version"] == ENVIRONMENT["cublaslt_version"]
    assert web == contents(zipfile.ZipFile(cli_zip))


@pytest.mark.slow
def test_the_recorded_grid64_bundle_pins_the_same_algorithms_from_the_dashboard(
    client, db, tmp_path
):
    """Without --include-slower: the shapes where cuBLASLt-autotune's pick beat our kernels in
    the H200 grid64 NN campaign's finals are served by that pick in both zips."""
    from tests.webapp.test_import_campaign_database import GRID64

    name = "nn-64shapes-2bacba6c"
    call_command("import_results", str(GRID64))
    cli_zip = tmp_path / "cli.zip"
    assert engine_main(["bundle", name, "--db", str(GRID64), "--out", str(cli_zip)]) == 0
    web = contents(download(client, Campaign.objects.get(name=name), query=""))
    assert web == contents(zipfile.ZipFile(cli_zip))
    kernels = web[f"gemmforge-{name}/gemmforge_bundle/kernels.json"]["kernels"]
    assert any(k["kind"] == CUBLASLT for k in kernels)
