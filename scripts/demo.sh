#!/usr/bin/env bash
# The first command to run: sets up .venv (first time only) and runs the demo.
#
#   bash scripts/demo.sh [--help | demo.run options]
#
# Starts the demo A2A worker and the gateway in front of it, drives a real
# a2a-sdk client through the gateway, prints what the gateway's metrics saw
# and shows it refusing to continue a terminal task. Exit status is that of
# `python -m demo.run` (0 ok, 1 failure). Needs only Python 3.11+ (python3,
# or PYTHON=...) and access to the package registry on the first run.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh
ensure_venv demo

exec python -m demo.run "$@"
