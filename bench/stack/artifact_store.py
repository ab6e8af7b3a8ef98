"""Publish and fetch real compile-cache entries through the artifact store, to compare
with compiling them on the GPU host (bench/NOTES.md §14).

Takes the successful entries of an engine compile cache (read only: ``--cache``, default
``.cache/gemmforge``), publishes each one through webapp.campaigns.artifact_store into a fresh
FileSystemStorage folder (as a compile step does: look, pack, save), then fetches each into a
fresh compile cache (as a GPU step does: look, open, read, check, install) and once more as one
batch of ``--batch`` keys. Each entry's own build time (``result.json``'s ``seconds``, measured
when it was compiled on this machine) is kept beside its times. Also packs each entry at gzip
levels 0 (a plain tar), 1 (the store's) and 6 for the sizes, and times the key computation a
GPU step does first (engine.compilation.compile.config_keys for a batch of library configs).

    .venv/bin/python bench/stack/artifact_store.py [--cache DIR] [--limit N] [--batch 16]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings_test")

import django  # noqa: E402

django.setup()

from django.core.files.storage import FileSystemStorage  # noqa: E402

from engine.compilation import cache_entries, toolkit  # noqa: E402
from engine.compilation import compile as comp  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from webapp.campaigns import artifact_store  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "2026-12-04-artifacts" / "cache_entries.json"


def successful_keys(config: EngineConfig) -> list[str]:
    """Keys of the complete, successful entries (entries being built are skipped)."""
    keys = []
    for entry in sorted(config.kernel_cache.glob("*/*")):
        if entry.is_dir() and not entry.name.startswith("."):
            result = comp.try_load(entry.name, config)
            if result is not None and result.ok:
                keys.append(entry.name)
    return keys


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 2),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "max": round(ordered[-1], 2),
        "mean": round(statistics.fmean(ordered), 2),
    }


def measure(source: EngineConfig, keys: list[str], batch: int, work: Path) -> dict[str, Any]:
    storage = FileSystemStorage(location=str(work / "store"))
    rows: list[dict[str, Any]] = []
    for key in keys:
        result = comp.try_load(key, source)
        assert result is not None
        assert result.library is not None
        sizes = {
            f"gzip{level}_bytes": len(cache_entries.pack_entry(key, source, compress_level=level))
            for level in (0, 1, 6)
        }
        started = time.perf_counter()
        published = artifact_store.artifacts_publish(keys=[key], config=source, storage=storage)
        publish = time.perf_counter() - started
        started = time.perf_counter()
        again = artifact_store.artifacts_publish(keys=[key], config=source, storage=storage)
        republish = time.perf_counter() - started
        assert (published, again) == ({"published": 1}, {"present": 1}), (published, again)
        rows.append(
            {
                "key": key,
                "lib_bytes": result.library.stat().st_size,
                "artifact_bytes": storage.size(artifact_store.artifact_name(key)),
                **sizes,
                "build_s": round(result.seconds, 2),
                "publish_ms": ms(publish),
                "publish_present_ms": ms(republish),
            }
        )
    target = EngineConfig(cache_dir=work / "gpu-cache", nvcc=source.nvcc)
    for row in rows:
        started = time.perf_counter()
        fetched = artifact_store.artifacts_fetch(keys=[row["key"]], config=target, storage=storage)
        row["fetch_ms"] = ms(time.perf_counter() - started)
        assert fetched == {"installed": 1}, fetched
        started = time.perf_counter()
        again = artifact_store.artifacts_fetch(keys=[row["key"]], config=target, storage=storage)
        row["fetch_present_ms"] = ms(time.perf_counter() - started)
        assert again == {"present": 1}, again
    batch_keys = keys[:batch]
    batch_target = EngineConfig(cache_dir=work / "gpu-cache-batch", nvcc=source.nvcc)
    started = time.perf_counter()
    fetched = artifact_store.artifacts_fetch(keys=batch_keys, config=batch_target, storage=storage)
    batch_s = time.perf_counter() - started
    assert fetched == {"installed": len(batch_keys)}, fetched
    build = [r["build_s"] for r in rows]
    return {
        "entries": len(rows),
        "lib_bytes": summary([r["lib_bytes"] for r in rows]),
        "artifact_bytes": summary([r["artifact_bytes"] for r in rows]),
        "gzip_ratio": round(
            sum(r["gzip0_bytes"] for r in rows) / sum(r["artifact_bytes"] for r in rows), 2
        ),
        "publish_ms": summary([r["publish_ms"] for r in rows]),
        "publish_present_ms": summary([r["publish_present_ms"] for r in rows]),
        "fetch_ms": summary([r["fetch_ms"] for r in rows]),
        "fetch_present_ms": summary([r["fetch_present_ms"] for r in rows]),
        "build_s_here": summary(build),
        "batch": {"keys": len(batch_keys), "fetch_s": round(batch_s, 3)},
        "per_entry": rows,
    }


def key_lookup(source: EngineConfig, batch: int) -> dict[str, Any]:
    """What a GPU step adds before fetching: the cache keys of a batch of library configs (the
    first call asks nvcc its version), and how many of them the source cache holds (the prebuild
    for sm_90 built them under the same keys)."""
    from engine.codegen.library import library
    from engine.problem import Layout

    configs = library("sm90", Layout.NN)
    toolkit.nvcc_version.cache_clear()
    started = time.perf_counter()
    comp.config_keys(configs[:batch], config=source, target_arch="sm_90")
    cold = time.perf_counter() - started
    started = time.perf_counter()
    comp.config_keys(configs[:batch], config=source, target_arch="sm_90")
    warm = time.perf_counter() - started
    keys = comp.config_keys(configs, config=source, target_arch="sm_90")
    return {
        "batch": min(batch, len(configs)),
        "first_ms": ms(cold),
        "next_ms": ms(warm),
        "library_sm90_nn": len(keys),
        "in_source_cache": sum(comp.try_load(k, source) is not None for k in keys),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "gemmforge")
    parser.add_argument("--limit", type=int, default=0, help="entries at most (0: all)")
    parser.add_argument("--batch", type=int, default=16, help="keys of the one-batch fetch")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    source = EngineConfig(cache_dir=args.cache)
    keys = successful_keys(source)[: args.limit or None]
    if not keys:
        print(f"no successful entries under {source.kernel_cache}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="gemmforge-artifacts-") as folder:
        started = time.time()
        measured = measure(source, keys, args.batch, Path(folder))
        lookup = key_lookup(source, args.batch)
    report = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "host": {
            "name": socket.gethostname(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
        "store": "django.core.files.storage.FileSystemStorage (a temporary folder, local disk)",
        "source_cache": str(source.kernel_cache),
        "seconds": round(time.time() - started, 1),
        "key_lookup": lookup,
        **measured,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    brief = {k: v for k, v in report.items() if k != "per_entry"}
    print(json.dumps(brief, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
