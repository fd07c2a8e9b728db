# Sourced by start.sh and test.sh: create .venv and install a requirements file once
# (re-installed only when the file changes). Sets VENV.
VENV="${VENV:-.venv}"
req="$1"
if [ ! -x "$VENV/bin/python" ]; then
  echo "Creating $VENV…"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
stamp="$VENV/.installed-$(basename "$req")"
want="$(cat requirements*.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "Installing $req into $VENV…"
  "$VENV/bin/python" -m pip install -q -r "$req"
  echo "$want" > "$stamp"
fi
export VENV
