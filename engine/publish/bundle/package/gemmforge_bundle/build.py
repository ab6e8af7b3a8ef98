"""Builds the bundle's kernels once: ``python -m gemmforge_bundle.build [--jobs N]``.

Needs nvcc (CUDA 12.4 or newer) and the CUTLASS headers: ``pip install nvidia-cutlass`` or
CUTLASS_INCLUDE=/path/to/cutlass/include.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def cutlass_include() -> Path:
    if os.environ.get("CUTLASS_INCLUDE"):
        return Path(os.environ["CUTLASS_INCLUDE"])
    spec = importlib.util.find_spec("cutlass_library")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "source" / "include"
        if (path / "cutlass" / "cutlass.h").is_file():
            return path
    raise SystemExit(
        "error: CUTLASS headers not found: pip install nvidia-cutlass, or set CUTLASS_INCLUDE"
    )


def command(entry: dict, manifest: dict, include: Path) -> list[str]:
    argv = [os.environ.get("NVCC", "nvcc"), *manifest["nvcc_flags"]]
    for arch in entry["archs"]:
        number = arch.removeprefix("sm_")
        argv.append(f"-gencode=arch=compute_{number},code=sm_{number}")
    argv += [f"-I{PACKAGE / 'include'}", f"-I{include}"]
    argv += [
        str(PACKAGE / "kernels" / f"{entry['name']}.cu"),
        "-o",
        str(PACKAGE / "lib" / f"{entry['name']}.so"),
    ]
    return argv


def build_one(entry: dict, manifest: dict, include: Path) -> tuple[str, bool, str]:
    argv = command(entry, manifest, include)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return entry["name"], done.returncode == 0, done.stderr if done.returncode else shlex.join(argv)


def cuda_version(nvcc: str) -> int | None:
    """nvcc's CUDA version as 1000·major + 10·minor (as cuDriverGetVersion reports a driver's):
    the ops compare it with the driver's at load and fall back to torch.matmul when older."""
    done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"release (\d+)\.(\d+)", done.stdout)
    return int(found[1]) * 1000 + int(found[2]) * 10 if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemmforge_bundle.build")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    manifest = json.loads((PACKAGE / "kernels.json").read_text())
    (PACKAGE / "lib").mkdir(exist_ok=True)
    include = cutlass_include()
    version = cuda_version(os.environ.get("NVCC", "nvcc"))
    (PACKAGE / "lib" / "build.json").write_text(json.dumps({"cuda_version": version}))
    entries = manifest["kernels"]
    print(f"building {len(entries)} kernels with {args.jobs} jobs", flush=True)
    failed = 0
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for name, ok, log in pool.map(lambda e: build_one(e, manifest, include), entries):
            print(f"  {'ok    ' if ok else 'FAILED'} {name}", flush=True)
            if not ok:
                failed += 1
                print(log[-4000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
