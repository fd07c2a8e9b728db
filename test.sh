#!/usr/bin/env bash
# Install everything the tests need (Python packages in .venv, Debian's chromium for the
# browser tests) and run the whole test suite. Exits non-zero on any failure.
# Usage: ./test.sh [extra pytest options, e.g. -k flip]
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh requirements-dev.txt
if [ ! -x /usr/bin/chromium ]; then
  echo "Installing Debian's chromium for the browser tests…"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
"$VENV/bin/python" -m ruff check core pages ui app.py tests benchmarks
exec "$VENV/bin/python" -m pytest -q "$@"
