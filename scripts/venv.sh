# Sourced by start.sh and test.sh: create .venv and install a requirements file once
# (re-installed only when the file changes). Sets VENV.
VENV="${VENV:-.venv}"
req="$1"
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Python 3.11 or newer is needed as 'python3' (found: $(python3 --version 2>&1))." >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "Creating $VENV…"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
stamp="$VENV/.installed-$(basename "$req")"
want="$(cat requirements*.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "Installing $req into $VENV…"
  "$VENV/bin/python" -m pip install -q -r "$req"
  # the project itself (packages core and ui, declared in pyproject.toml), editable
  "$VENV/bin/python" -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
export VENV
