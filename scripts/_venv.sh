# Sourced by demo.sh and test.sh: `setup_venv SPEC` makes (or reuses) $VENV and installs the
# package as SPEC (e.g. "." or ".[dev]") into it.
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

setup_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
  fi
  # pip's "Location ... is ignored" notes about this machine's local indexes are noise here.
  quiet_pip() { "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }
  quiet_pip install --quiet --upgrade pip
  quiet_pip install --quiet -e "$1"
  "$VENV/bin/python" -c 'import rulvar_otel' # fail here, clearly, if the install did not
}
