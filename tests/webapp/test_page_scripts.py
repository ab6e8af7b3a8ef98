"""The pure parts of the pages' scripts, run in Node: the launch form's shape counter and the
speedup axes' tick picker (the browser test draws them; this pins their arithmetic)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from django.conf import settings

from engine.problem import ALIGN_ELEMENTS, MAX_DIM, MAX_OPERAND_BYTES
from webapp.campaigns.launch import presets_for_js

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")
STUB = (
    "globalThis.window = {};"
    "globalThis.document = {getElementById: () => null, addEventListener() {}};"
)
LIMITS = {"maxDim": MAX_DIM, "align": ALIGN_ELEMENTS, "maxOperandBytes": MAX_OPERAND_BYTES}


def run_script(script: str, expression: str):
    source = settings.BASE_DIR / "static" / "js" / script
    read = f"require('fs').readFileSync({json.dumps(str(source))}, 'utf8')"
    program = f"{STUB} require('vm').runInThisContext({read});"
    program += f"console.log(JSON.stringify({expression}));"
    done = subprocess.run([NODE, "-e", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def count(shapes: str = "", **fields: str) -> dict:
    shape_input = {"shapes": shapes, "grid_m": "", "grid_n": "", "grid_k": "", "preset": "",
                   "tokens": "", **fields}  # fmt: skip
    arguments = ", ".join(json.dumps(v) for v in (shape_input, presets_for_js(), LIMITS))
    return run_script("launch.js", f"window.gemmforgeCountShapes({arguments})")


def test_the_shape_counter_leaves_out_lines_the_server_refuses():
    lines = "4096x4096x4096\n8x9x8\n0x64x64\n4096.0\n64x64x64\n64x64x64\n2000000x8x8\n"
    assert count(lines) == {"count": 2, "invalid": 4}


def test_the_shape_counter_checks_grid_combinations_and_counts_presets():
    assert count(grid_m="64, 128", grid_n="64, 12", grid_k="64") == {"count": 2, "invalid": 2}
    assert count(preset="cuda-l2") == {"count": 1000, "invalid": 0}


def ticks(low: float, high: float, most: int = 7) -> list[float]:
    return run_script("campaign.js", f"window.gemmforgeRatioTicks({low}, {high}, {most})")


def test_a_narrow_speedup_axis_is_labelled_above_and_below_one():
    picked = ticks(0.7, 1.3)
    assert 1 in picked
    assert any(v > 1 for v in picked)
    assert any(v < 1 for v in picked)
    assert len(picked) <= 8


def test_a_wide_speedup_axis_gets_few_labels_spread_out():
    picked = ticks(0.01, 3, most=5)
    assert 1 in picked
    assert len(picked) <= 6
    assert picked == sorted(picked)


# A page with a hidden times line of two fields, and a progress endpoint that answers once
PROGRESS_PAGE = """
const node = (dataset = {}, children = []) => ({
  dataset, hidden: false, textContent: "", className: "",
  querySelectorAll: () => children, querySelector: () => null,
});
const timeFields = [node({times: "wall"}), node({times: "rate"})];
const page = {
  progress: node({src: "/progress.json", pollMs: "5000"}),
  times: Object.assign(node({}, timeFields), {hidden: true}),
  "progress-updated": node(),
};
globalThis.document = {getElementById: (id) => page[id] || null, querySelector: () => null};
globalThis.fetch = async () => ({ok: true, json: async () => (ANSWER)});
"""


def test_live_progress_fills_the_times_line_and_shows_it():
    answer = {
        "status": "running",
        "status_label": "Running",
        "gpu_wait": None,
        "problems": [],
        "times_display": {"wall": "7 min", "rate": "480"},
    }
    source = settings.BASE_DIR / "static" / "js" / "progress.js"
    read = f"require('fs').readFileSync({json.dumps(str(source))}, 'utf8')"
    program = PROGRESS_PAGE.replace("ANSWER", json.dumps(answer))
    program += f"require('vm').runInThisContext({read});"
    program += (
        "setTimeout(() => { console.log(JSON.stringify({hidden: page.times.hidden, "
        "fields: timeFields.map((f) => f.textContent)})); process.exit(0); }, 50);"
    )
    done = subprocess.run([NODE, "-e", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"hidden": False, "fields": ["7 min", "480"]}
