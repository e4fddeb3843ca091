#!/usr/bin/env bash
# One entry point for people and CI: creates .venv on first use (and whenever pyproject.toml
# changes), then runs the task.
#
#   ./dev.sh demo      the "I saw a saw" demo: attention on the simulated core (attn demo)
#   ./dev.sh test      the whole test suite (pytest -n auto); extra args go to pytest
#   ./dev.sh lint      ruff
#   ./dev.sh shell     a shell with the venv active
#
# ATTN_EXTRAS picks the optional dependency groups (default: dev,fpga,plots,torch).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRAS=${ATTN_EXTRAS:-dev,fpga,plots,torch}

setup() {
    if ! command -v "$PYTHON" >/dev/null; then
        echo "dev.sh: $PYTHON not found; install Python >= 3.10" >&2; exit 1
    fi
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
        echo "dev.sh: Python >= 3.10 is needed, $PYTHON is $("$PYTHON" -V 2>&1)" >&2; exit 1
    fi
    local stamp="$VENV/.installed"
    local want
    want="$(cat pyproject.toml; echo "$EXTRAS")"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        echo "dev.sh: creating $VENV"
        if ! "$PYTHON" -m venv "$VENV"; then
            rm -rf "$VENV"
            echo "dev.sh: '$PYTHON -m venv' failed; on Debian/Ubuntu: apt-get install python3-venv" >&2
            exit 1
        fi
    fi
    echo "dev.sh: installing the project and its [$EXTRAS] extras into $VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e ".[$EXTRAS]"
    printf '%s' "$want" > "$stamp"
}

missing_os_tools() {
    local missing=()
    command -v iverilog >/dev/null || missing+=("iverilog")
    command -v g++ >/dev/null || missing+=("g++")
    command -v make >/dev/null || missing+=("make")
    if [ ${#missing[@]} -gt 0 ]; then
        echo "dev.sh: note: ${missing[*]} not found; the simulations that need them will skip" \
             "(apt-get install iverilog g++ make)"
    fi
}

task=${1:-}
[ $# -gt 0 ] && shift
case "$task" in
    demo)
        setup
        mkdir -p build
        exec "$VENV/bin/attn" demo "$@" ;;
    test)
        setup
        missing_os_tools
        exec "$VENV/bin/python" -m pytest -n auto "$@" ;;
    lint)
        setup
        exec "$VENV/bin/ruff" check . ;;
    shell)
        setup
        exec bash --rcfile <(echo "source '$VENV/bin/activate'") ;;
    *)
        sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
        exit 2 ;;
esac
