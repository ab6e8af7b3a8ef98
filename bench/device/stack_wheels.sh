#!/usr/bin/env bash
# Fetch what bench/stack/stack_run.py needs on the lent GPU machine, which has no network: wheels
# of the web stack for its Python 3.12 (into .whl/) and Debian 12's redis-server (into .deb/). Run it
# here; carry .whl and .deb with the GPU call. bench/device/gpu_run.sh installs .whl/*.whl into
# /tmp/site; stack_run.py unpacks .deb/*.deb with dpkg -x when no redis-server is on PATH.
#   usage: bash bench/device/stack_wheels.sh
# The device already has numpy, filelock, Pygments, requests, psutil, nvidia-ml-py, click,
# python-dateutil, packaging, PyYAML and pytest, so those are left out.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}

# Top-level pins as in requirements.txt; their dependencies at the versions .venv resolved. click
# is on the device too, but celery 5.7 needs click>=8.3.1 and the device's version is not known.
WHEELS=(
  Django==5.2.19 asgiref==3.13.0 sqlparse==0.6.1
  celery==5.7.0 kombu==5.7.0 billiard==4.3.2 vine==5.1.0 amqp==5.4.2 redis==8.1.0
  click==8.5.1 click-didyoumean==0.3.1 click-repl==0.4.1 click-plugins==1.1.1.2
  prompt-toolkit==3.0.53 wcwidth==0.9.4 tzlocal==5.4.5
  dj-database-url==3.1.2 whitenoise==6.12.0 gunicorn==27.0.1
)
# redis-server and the libraries an Ubuntu image may lack (libssl3, libsystemd0 are there)
DEBS=(redis-server redis-tools libjemalloc2 liblzf1 libatomic1)

mkdir -p .whl .deb
grep -qx '/.deb/' .git/info/exclude 2>/dev/null || echo '/.deb/' >>.git/info/exclude

for pin in "${WHEELS[@]}"; do
  name=${pin%%==*}
  if ls .whl/ | grep -qi "^$(tr - _ <<<"$name")-${pin##*==}-"; then continue; fi
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$pin"
done

# Every dependency a wheel declares for Linux and Python 3.12 must be here or on the device.
"$PY" - <<'PY'
import pathlib, re, zipfile
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

device = {"numpy", "filelock", "pygments", "requests", "psutil", "nvidia-ml-py",
          "python-dateutil", "packaging", "pyyaml", "torch", "typing-extensions", "pytest"}  # pytest: the GPU tests
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython"}
# nvidia-cutlass travels for its headers only
wheels = sorted(w for w in pathlib.Path(".whl").glob("*.whl") if "cutlass" not in w.name)
have = {canonicalize_name(w.name.split("-")[0]): w.name.split("-")[1] for w in wheels}
names = [canonicalize_name(w.name.split("-")[0]) for w in wheels]
dupes = sorted({n for n in names if names.count(n) > 1})
missing = set()
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        for line in z.read(meta).decode().splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker and not req.marker.evaluate({**env, "extra": ""}):
                continue
            name = canonicalize_name(req.name)
            if name in device:
                continue
            if name not in have or not req.specifier.contains(have[name], prereleases=True):
                missing.add(f"{wheel.name}: {req}")
print(f"{len(wheels)} wheels in .whl")
if dupes or missing:
    raise SystemExit(f"two versions of {dupes}; unmet: {sorted(missing)}")
PY

(cd .deb && apt-get download "${DEBS[@]}")
ls .deb
du -ch .whl .deb | tail -1
