#!/usr/bin/env bash
# Install what the app needs (in .venv) and start it with the demo audit ready.
# Usage: ./start.sh [extra streamlit options, e.g. --server.port 8502]
# The app listens on 127.0.0.1 only (.streamlit/config.toml). Another --server.address needs a
# login or an authenticating proxy: see SECURITY.md; without one this script refuses to start.
set -euo pipefail
cd "$(dirname "$0")"
# who may reach the app is checked before anything is installed (core/serving.py: stdlib only)
if python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  python3 -m core.serving "$@" || exit 2
fi
source scripts/venv.sh requirements.txt
"$VENV/bin/python" -m core.serving "$@" || exit 2
echo "Starting the app on http://localhost:${PORT:-8501} (the demo audit is created on first start)"
exec "$VENV/bin/python" -m streamlit run serve.py \
  --server.port "${PORT:-8501}" --browser.gatherUsageStats false "$@"
