"""Ahead-of-time compilation of the Triton kernel a CUDA source embeds (no GPU needed).

A Triton candidate is one ``.cu`` file: a launcher behind the kernel C ABI that includes
``gemmforge_triton.h``, and, in a comment block, the Triton kernel and how to compile it::

    /* gemmforge-triton
    {"kernel": "hgemm", "signature": {...}, "constexprs": {...}, "num_warps": 4,
     "num_stages": 3, "aligned": ["A", "B", "C"]}
    ---
    <Python source defining the @triton.jit kernel>
    gemmforge-triton */

engine.compilation.compile builds such a source in two steps, both in its sandbox: this module, run
as ``python -m engine.compilation.triton_aot kernel.cu gemmforge_triton.h sm_90a``, compiles the
kernel with ``triton.compile`` for the arch (``GPUTarget("cuda", 90, 32)`` for sm_90a: Triton's own
target, so no GPU is asked) and writes the header — the cubin as bytes and the facts a launch needs
(entry name, warps, dynamic shared memory, global scratch per program); then nvcc builds the
launcher into the library. Triton ≥ 3.3 kernels take two more pointers after their own parameters
(global and profile scratch); the launcher passes them.

Why not ``triton.tools.compile`` (Triton's AOT tool)? Its C launcher uses the driver API
(cuModuleLoadData per context, -lcuda), exits the process on a CUDA error, hard-codes device 0
and refuses kernels that need global scratch (device-side tensor descriptors). The ABI needs an
error code back, any device, and the TMA variants; the compile call underneath is the same.

The block's format (spec, marker, parsing) is engine.codegen.triton_blocks', since the Triton family
renders it; this module builds from it and imports Triton only in :func:`compile_kernel`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from engine.codegen.triton_blocks import (
    END,
    MARKER,
    SEPARATOR,
    TritonSourceError,
    extract,
)

HEADER_NAME = "gemmforge_triton.h"
_ARCH_RE = re.compile(r"^sm_([0-9]{2,3})a?$")


COMPILED_MARKER = "/* The Triton kernel this launcher's cubin (included below) was compiled from:\n"


def self_contained(source: str, header: str) -> str:
    """``source`` with its built header in place of the include, and its Triton block kept as
    an ordinary comment: a .cu that nvcc alone builds (a bundle's kernels are built where
    Triton may not be installed)."""
    spec, python = extract(source)
    include = f'#include "{HEADER_NAME}"\n'
    if include not in source:
        raise TritonSourceError(f"the source does not include {HEADER_NAME}")
    start = source.index(MARKER)
    end = source.index(END, start) + len(END)
    block = f"{COMPILED_MARKER}{spec.to_json()}{SEPARATOR}{python.rstrip()}\n*/"
    text = source[:start] + block + source[end:]
    return text.replace(include, header.rstrip() + "\n", 1)


# What the Python of a Triton block may use: it runs at build time (in the build's sandbox), so
# it may import only Triton and math, call no builtin that reaches files, code or the
# interpreter's internals, and touch no private or dunder attribute.
ALLOWED_IMPORTS = frozenset({"triton", "triton.language", "math"})
FORBIDDEN_NAMES = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "__import__",
        "globals",
        "locals",
        "vars",
        "getattr",
        "setattr",
        "delattr",
        "breakpoint",
        "input",
        "help",
        "exit",
        "quit",
        "memoryview",
    }
)


def python_findings(python: str) -> list[tuple[int | None, str]]:
    """(line, what) for everything the Triton block's Python may not do; empty when it may be
    built. Pure: it parses, never runs, the code."""
    try:
        tree = ast.parse(python)
    except SyntaxError as exc:
        return [(exc.lineno, f"not valid Python: {exc.msg}")]
    found: list[tuple[int | None, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.Import):
            found += [
                (line, f"imports {a.name} (only {', '.join(sorted(ALLOWED_IMPORTS))})")
                for a in node.names
                if a.name not in ALLOWED_IMPORTS
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module not in ALLOWED_IMPORTS:
                found.append((line, f"imports from {node.module or '.'}"))
            found += [(line, f"imports {a.name}") for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id[:2] == "__"):
            found.append((line, f"uses {node.id}"))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            found.append((line, f"touches the private attribute .{node.attr}"))
    return sorted(found, key=lambda f: f[0] or 0)


def capability(arch: str) -> int:
    """``"sm_90a"`` → 90 (Triton's target; for 90 it emits sm_90a code)."""
    match = _ARCH_RE.match(arch)
    if match is None:
        raise ValueError(f"unknown arch {arch!r}: expected e.g. sm_90a")
    return int(match.group(1))


def render_header(
    *, cubin: bytes, name: str, num_warps: int, shared: int, scratch: int, scratch_align: int
) -> str:
    """``gemmforge_triton.h``: the cubin and the launch facts, as the launcher expects them."""
    if scratch and 256 % max(1, scratch_align):
        raise TritonSourceError(f"global scratch alignment {scratch_align} does not divide 256")
    rows = []
    for i in range(0, len(cubin), 24):
        rows.append("  " + ", ".join(f"0x{b:02x}" for b in cubin[i : i + 24]) + ",")
    body = "\n".join(rows)
    return (
        "// Written by engine/compilation/triton_aot.py at build time: the Triton kernel's cubin\n"
        "// and what launching it needs. Not a source: the build makes it again from kernel.cu.\n"
        "#pragma once\n"
        f'#define GEMMFORGE_TRITON_NAME "{name}"\n'
        f"#define GEMMFORGE_TRITON_WARPS {num_warps}\n"
        f"#define GEMMFORGE_TRITON_SHARED {shared}\n"
        f"#define GEMMFORGE_TRITON_SCRATCH_BYTES {scratch}\n"
        f"alignas(256) static const unsigned char kTritonCubin[{len(cubin)}] = {{\n{body}\n}};\n"
    )


def compile_kernel(source: str, arch: str, workdir: Path) -> str:  # pragma: no cover - triton
    """Compiles the embedded kernel for ``arch``; returns the header's text. The Python source
    is written into ``workdir`` and imported from there (Triton reads a kernel's source file).
    Raises TritonSourceError for a malformed block; Triton's own errors propagate."""
    import importlib.util

    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec, python = extract(source)
    if findings := python_findings(python):
        line, what = findings[0]
        raise TritonSourceError(f"the Triton source (line {line}) {what}")
    module_path = workdir / "triton_kernel.py"
    module_path.write_text(python)
    loader = importlib.util.spec_from_file_location("gemmforge_triton_kernel", module_path)
    if loader is None or loader.loader is None:
        raise TritonSourceError("cannot import the Triton source")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    kernel = getattr(module, spec.kernel, None)
    if kernel is None or not hasattr(kernel, "arg_names"):
        raise TritonSourceError(f"the Triton source defines no @triton.jit {spec.kernel!r}")
    missing = [name for name in kernel.arg_names if name not in spec.signature]
    if missing:
        raise TritonSourceError(f"the spec's signature lacks {', '.join(missing)}")
    attrs = {
        (kernel.arg_names.index(name),): [["tt.divisibility", 16]]
        for name in spec.aligned
        if name in kernel.arg_names
    }
    ast = ASTSource(fn=kernel, signature=spec.signature, constexprs=spec.constexprs, attrs=attrs)
    # ptxas -v on stdout: engine.compilation.compile parses the report
    knobs.nvidia.dump_ptxas_log = True
    compiled = triton.compile(
        ast,
        target=GPUTarget("cuda", capability(arch), 32),
        options={"num_warps": spec.num_warps, "num_stages": spec.num_stages},
    )
    meta = compiled.metadata
    if getattr(meta, "profile_scratch_size", 0):
        raise TritonSourceError("kernels that need profile scratch are not supported")
    print(
        f"triton {triton.__version__}: {meta.name} for {arch}, {meta.num_warps} warps, "
        f"{meta.shared} B shared, {meta.global_scratch_size} B global scratch a program"
    )
    return render_header(
        cubin=compiled.asm["cubin"],
        name=meta.name,
        num_warps=meta.num_warps,
        shared=meta.shared,
        scratch=meta.global_scratch_size,
        scratch_align=meta.global_scratch_align,
    )


def main(argv: list[str]) -> int:  # pragma: no cover - run as a build child
    if len(argv) != 3:
        usage = "usage: python -m engine.compilation.triton_aot SOURCE.cu HEADER.h ARCH"
        print(usage, file=sys.stderr)
        return 2
    sys.dont_write_bytecode = True  # nothing but the header and the kernel's source is left
    source, header, arch = Path(argv[0]), Path(argv[1]), argv[2]
    try:
        text = compile_kernel(source.read_text(), arch, header.parent)
    except TritonSourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    header.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
