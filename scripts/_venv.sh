# shellcheck shell=bash
# Sourced by scripts/demo.sh and scripts/test.sh (not run on its own).
#
# ensure_venv EXTRA: make sure .venv exists and has the project installed
# editable with the given extra (`pip install -e '.[EXTRA]'`), then put
# .venv/bin first on PATH. The install is skipped when a stamp file in .venv
# says the same extra was already installed from the same pyproject.toml with
# the same interpreter, so reruns take well under a second.
#
# Environment: PYTHON (default python3) is the interpreter that creates .venv;
# it must be Python 3.11 or newer. Delete .venv to start over.

ensure_venv() {
    local extra="$1"
    local python="${PYTHON:-python3}"
    local venv=".venv"

    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c '' 2>/dev/null; then
        if ! command -v "$python" >/dev/null 2>&1; then
            echo "error: $python not found on PATH; install Python 3.11+ (or set PYTHON=/path/to/python3.11)" >&2
            return 1
        fi
        if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            echo "error: $("$python" -V 2>&1) is too old; a2a-gateway needs Python 3.11+ (set PYTHON=/path/to/python3.11)" >&2
            return 1
        fi
        if [[ -e "$venv" ]]; then
            echo "note: $venv exists but its python does not run; recreating it" >&2
            rm -rf "$venv"
        fi
        echo "creating $venv with $("$python" -V 2>&1) ..." >&2
        "$python" -m venv "$venv"
    fi

    local stamp="$venv/.a2a-gateway-installed-$extra"
    local want
    want="$("$venv/bin/python" - "$extra" <<'PY'
import hashlib, sys
with open("pyproject.toml", "rb") as fh:
    digest = hashlib.sha256(fh.read()).hexdigest()
print(f"{digest} {sys.argv[1]} {sys.version.split()[0]}")
PY
)"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
        echo "installing a2a-gateway with pip install -e '.[$extra]' into $venv (first run or pyproject.toml changed) ..." >&2
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extra]"
        printf '%s\n' "$want" >"$stamp"
    fi

    export VIRTUAL_ENV="$PWD/$venv"
    export PATH="$VIRTUAL_ENV/bin:$PATH"
}
