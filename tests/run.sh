#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a used one:
#   1. create (or reuse) a virtual environment,
#   2. build tensorplay from source and install it with its test dependencies
#      (torch pinned, from PyPI),
#   3. install nginx (Debian's nginx-light) for the remote-scan tests when root,
#   4. run cargo test (the core, without Python) and pytest.
# TENSORPLAY_VENV chooses the environment (default: ~/.cache/tensorplay-venv).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${TENSORPLAY_VENV:-$HOME/.cache/tensorplay-venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip
# The distribution was named tensorplay before it became tensorplay-serialization:
# in a used environment, the old one would hold the same files.
"$PY" -m pip uninstall --quiet --yes tensorplay 2>/dev/null || true
# The docs extra: tests/test_docs.py builds the site (mkdocs build --strict).
"$PY" -m pip install --quiet ".[test,docs]"

# The remote-scan tests serve files with a real nginx (Debian's nginx-light).
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
    else
        echo "tests/run.sh: the remote-scan tests need nginx: apt-get install nginx-light" >&2
    fi
fi

cargo test --no-default-features --features fuzzing --quiet

set +e
# Run from tests/ so the installed package, not the source tree, is imported.
# Every test dependency is installed above: a test that would skip for a missing
# one fails instead (tests/conftest.py).
(cd tests && TENSORPLAY_REQUIRE_DEPS=1 "$PY" -m pytest -q -p no:cacheprovider "$@")
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests"
    status=0
fi
exit "$status"
