"""engine/ is a library: it never imports Django or the web app, and imports without settings."""

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"django", "webapp", "celery"}


def forbidden_imports(source: str, label: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename=label)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [
            f"{label}:{node.lineno} imports {name}"
            for name in names
            if name.split(".")[0] in FORBIDDEN
        ]
    return found


def test_no_engine_module_imports_django_or_webapp():
    modules = sorted((ROOT / "engine").rglob("*.py"))
    assert modules, "engine/ has no modules?"
    hits = [
        hit
        for module in modules
        for hit in forbidden_imports(module.read_text(), str(module.relative_to(ROOT)))
    ]
    assert hits == []


def test_the_guard_catches_django_and_webapp_imports():
    source = "import os\nfrom django.conf import settings\nimport webapp.campaigns.models as m\n"
    assert forbidden_imports(source, "bad.py") == [
        "bad.py:2 imports django.conf",
        "bad.py:3 imports webapp.campaigns.models",
    ]


def test_engine_imports_without_django_settings():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = "import sys, engine; assert 'django' not in sys.modules, 'engine pulled in django'"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
