#!/usr/bin/env bash
# Install what the app needs (in .venv) and start it with the demo audit ready.
# Usage: ./start.sh [extra streamlit options, e.g. --server.port 8502]
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh requirements.txt
echo "Starting the app on http://localhost:${PORT:-8501} (the demo audit is created on first start)"
exec "$VENV/bin/python" -m streamlit run app.py \
  --server.port "${PORT:-8501}" --browser.gatherUsageStats false "$@"
