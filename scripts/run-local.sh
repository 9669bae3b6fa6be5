#!/usr/bin/env bash
# kok's main job on this machine, with no meta-cluster: local mode on the example repository.
# Installs what local mode needs (scripts/setup.sh local: git and ansible-core in .venv), then runs
# `kok run --local` with .venv first on PATH until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh local
. scripts/venv.sh
exec cargo run --quiet --locked -- run --local --repo . --path examples/repo-layout/clusters --state-dir .kok "$@"
