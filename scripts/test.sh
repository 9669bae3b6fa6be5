#!/usr/bin/env bash
# The whole test suite: installs what the tests need, then runs every test of the workspace with the
# project's virtual environment (.venv) first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/venv.sh
cargo test --workspace --locked "$@"
