#!/usr/bin/env bash
# Installs what kok's tests and local mode need on a Debian machine: git, sshd, kubectl, ansible.
# Idempotent: installs only what is missing; fails loudly when something cannot be installed.
set -euo pipefail

need_apt=()
command -v git >/dev/null 2>&1 || need_apt+=(git)
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need_apt+=(openssh-client)
command -v kubectl >/dev/null 2>&1 || need_apt+=(kubernetes-client)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

if ! command -v ansible-playbook >/dev/null 2>&1; then
  echo "setup: installing ansible-core"
  python3 -m pip install --quiet ansible-core
fi

# `git daemon` ships with git; sshd needs its privilege-separation directory.
git daemon --help >/dev/null 2>&1 || { echo "setup: git daemon is missing (install git)" >&2; exit 1; }
[ -d /run/sshd ] || mkdir -p /run/sshd 2>/dev/null || true

for tool in git ssh-keygen kubectl ansible-playbook; do
  command -v "$tool" >/dev/null 2>&1 || { echo "setup: $tool is still missing after install" >&2; exit 1; }
done
[ -x /usr/sbin/sshd ] || { echo "setup: /usr/sbin/sshd is still missing after install" >&2; exit 1; }
