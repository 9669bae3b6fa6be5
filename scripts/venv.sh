# Sourced by the scripts: the project's virtual environment, where scripts/setup.sh installs ansible-core
# and, when PATH has none recent enough, kubectl. `.venv` at the repository's top unless KOK_VENV names
# another directory (relative to the top). Puts its bin first on PATH for this script and its children.
# Expects the current directory to be the repository's top.
KOK_VENV=${KOK_VENV:-.venv}
case $KOK_VENV in
  /*) ;;
  *) KOK_VENV=$PWD/$KOK_VENV ;;
esac
export KOK_VENV
export PATH="$KOK_VENV/bin:$PATH"
