"""bench/device/pack_kernels.sh: the carried kernel pack holds every successful build, each
library stripped of what no loader reads but keeping the symbols dlopen/dlsym and the symbol
check need; failed builds stay behind."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "device" / "pack_kernels.sh"
SOURCE = """
static int helper_that_only_the_library_calls(int x) { return x + 1; }
int gemmforge_hgemm(int x) { return helper_that_only_the_library_calls(x); }
"""

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("cc", "strip", "nm", "xz")),
    reason="needs cc, strip, nm and xz",
)


def cache_entry(cache: Path, key: str, *, ok: bool, source: Path) -> Path:
    entry = cache / "kernels" / key[:2] / key
    entry.mkdir(parents=True)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-g", str(source), "-o", str(entry / "lib.so")], check=True
    )
    (entry / "result.json").write_text(f'{{\n "ok": {"true" if ok else "false"}\n}}\n')
    (entry / "kernel.cu").write_text("// source\n")
    return entry


def symbols(library: Path, *flags: str) -> str:
    return subprocess.run(
        ["nm", *flags, str(library)], capture_output=True, text=True, check=False
    ).stdout


def test_the_pack_keeps_successful_builds_stripped_to_what_loaders_read(tmp_path):
    source = tmp_path / "k.c"
    source.write_text(SOURCE)
    cache = tmp_path / "cache"
    built = cache_entry(cache, "ab" + "0" * 62, ok=True, source=source)
    cache_entry(cache, "cd" + "1" * 62, ok=False, source=source)
    assert "helper_that_only_the_library_calls" in symbols(built / "lib.so")
    out = tmp_path / "carry" / "kernels.tar.xz"

    done = subprocess.run(
        ["bash", str(SCRIPT), str(cache), str(out)], capture_output=True, text=True, check=False
    )

    assert done.returncode == 0, done.stderr
    assert "1 kernels" in done.stdout
    with tarfile.open(out) as pack:
        names = sorted(m.name.removeprefix("./") for m in pack.getmembers() if m.isfile())
        pack.extractall(tmp_path / "unpacked", filter="data")
    key = built.name
    assert names == [f"ab/{key}/kernel.cu", f"ab/{key}/lib.so", f"ab/{key}/result.json"]
    library = tmp_path / "unpacked" / "ab" / key / "lib.so"
    assert "gemmforge_hgemm" in symbols(library, "-D")
    assert "helper_that_only_the_library_calls" not in symbols(library)
    assert library.stat().st_size < (built / "lib.so").stat().st_size
