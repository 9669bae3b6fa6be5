#!/usr/bin/env bash
# kok's main job on this machine, with no meta-cluster: local mode on the example repository.
# Installs ansible-core if it is missing, then runs `kok run --local` until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v git >/dev/null 2>&1 || { echo "run-local: git is required (apt-get install git)" >&2; exit 1; }
if ! command -v ansible-playbook >/dev/null 2>&1; then
  echo "run-local: installing ansible-core"
  python3 -m pip install --quiet ansible-core || python3 -m pip install --quiet --user ansible-core
  export PATH="$HOME/.local/bin:$PATH"
fi
exec cargo run --quiet --locked -- run --local --repo . --path examples/repo-layout/clusters --state-dir .kok "$@"
