# Shared by bin/run and bin/test (sourced, not run). Works from the repository root.

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

PY=.venv/bin/python

# ensure_venv REQUIREMENTS_FILE: create .venv if missing, then pip install unless a stamp shows
# that the requirements files did not change since the last successful install.
ensure_venv() {
    local requirements=$1 base stamp digest
    if [ ! -x "$PY" ]; then
        base=$(command -v python3.11 || command -v python3) || die "Python 3.11 is needed (apt-get install python3 python3-venv)"
        "$base" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
            || die "$base is $("$base" --version 2>&1); gemmforge needs Python 3.11 or newer"
        say "creating .venv with $base"
        "$base" -m venv .venv || die "could not create .venv (on Debian: apt-get install python3-venv)"
    fi
    stamp=".venv/.installed-${requirements%.txt}"
    digest=$(cat requirements*.txt | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]; then
        say "installing $requirements into .venv (the first time takes a few minutes)"
        "$PY" -m pip install --quiet --disable-pip-version-check -r "$requirements" \
            || die "pip install -r $requirements failed"
        echo "$digest" > "$stamp"
    fi
}

# redis_up URL: does a Redis server answer PING at URL?
redis_up() {
    "$PY" - "$1" <<'PY' >/dev/null 2>&1
import sys, redis
redis.Redis.from_url(sys.argv[1], socket_connect_timeout=2).ping()
PY
}

# install_redis: Debian's redis-server, when we may (root with apt-get).
install_redis() {
    command -v redis-server >/dev/null && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing Debian's redis-server"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null \
            || die "apt-get install redis-server failed"
    else
        die "no Redis at ${REDIS_URL:-redis://127.0.0.1:6379/0} and no redis-server to start: install it (sudo apt-get install redis-server) or set REDIS_URL"
    fi
}

# install_chromium: Debian's chromium and chromium-driver for the browser test (tests/webapp/
# test_browser.py), when we may (root with apt-get). Without them that test skips, loudly, except
# under CI=true, where it fails. Returns non-zero (and says why) when it cannot install.
install_chromium() {
    [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing Debian's chromium and chromium-driver for the browser test (about 2 minutes)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null \
            && return 0
        say "apt-get install chromium chromium-driver failed: the browser test cannot run"
    else
        say "no /usr/bin/chromium or /usr/bin/chromedriver and not root with apt-get: the browser" \
            "test will skip (sudo apt-get install chromium chromium-driver)"
    fi
    return 1
}
