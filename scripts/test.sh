#!/usr/bin/env bash
# The second command to run: sets up .venv (first time only) and runs pytest.
#
#   bash scripts/test.sh [pytest args...]     e.g.  bash scripts/test.sh -q -x tests/proxy
#
# Exit status is pytest's. Tests that need Redis start their own redis-server on
# 127.0.0.1 (apt-get install redis-server; skipped when it is missing, except under CI).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh
ensure_venv test

exec python -m pytest "$@"
