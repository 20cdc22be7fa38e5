"""A fake of a vLLM server's HTTP surface for unit tests (stdlib only): ``/health``,
``/metrics`` (the spec-decode counters in vLLM 0.32's Prometheus format) and
``/v1/completions`` (greedy: echoes a fixed continuation as ``token_ids``, with a per-request
``metrics.speculative_decoding`` summary; cut after a ``stop_token_ids`` token, each request's
body printed to the log as ``body {json}``). Started as the "python" of a serving environment:
``fake_vllm.py -m vllm.entrypoints.openai.api_server --model M --host H --port P ...``.

Behaviour switches (environment): FAKE_VLLM_MODE = ok | die | never_ready | die_on_request
(exits with code 7 on a POST); FAKE_VLLM_DELAY seconds before /health answers 200.
"""

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COUNTERS = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "pos": [0, 0, 0]}
START = time.monotonic()
MODE = os.environ.get("FAKE_VLLM_MODE", "ok")
DELAY = float(os.environ.get("FAKE_VLLM_DELAY", "0"))
K = 3
LOG_LOCK = threading.Lock()  # handler threads write whole lines, never interleaved


def log_line(text: str) -> None:
    with LOG_LOCK:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def metrics_text() -> str:
    lab = '{engine="0",model_name="target"}'
    lines = [
        "# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts counter",
        f"vllm:spec_decode_num_drafts_total{lab} {float(COUNTERS['drafts'])}",
        f"vllm:spec_decode_num_drafts_created{lab} 1.7e+09",
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f"vllm:spec_decode_num_draft_tokens_total{lab} {float(COUNTERS['draft_tokens'])}",
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f"vllm:spec_decode_num_accepted_tokens_total{lab} {float(COUNTERS['accepted'])}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
    ]
    for i, v in enumerate(COUNTERS["pos"]):
        pl = f'{{engine="0",model_name="target",position="{i}"}}'
        lines.append(f"vllm:spec_decode_num_accepted_tokens_per_pos_total{pl} {float(v)}")
    return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        log_line("request " + (args[0] % args[1:] if args else ""))  # type: ignore[operator]

    def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":
            ready = MODE in ("ok", "die_on_request") and time.monotonic() - START >= DELAY
            self._send(200 if ready else 503, "")
        elif self.path == "/metrics":
            self._send(200, metrics_text(), "text/plain")
        else:
            self._send(404, "{}")

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if MODE == "die_on_request":  # killed mid-request: the client's connection drops
            log_line("boom: the fake server died on a request")
            os._exit(7)
        log_line("body " + json.dumps(body, sort_keys=True))
        n = int(body["max_tokens"])
        out = [(int(body["prompt"][-1]) + i) % 50 for i in range(1, n + 1)]
        stops = set(body.get("stop_token_ids") or ())
        out = out[: next((i + 1 for i, t in enumerate(out) if t in stops), n)]
        steps = max(1, n // 2)  # 2 tokens per verification step: 1 accepted draft token
        with LOG_LOCK:
            COUNTERS["drafts"] += steps
            COUNTERS["draft_tokens"] += K * steps
            COUNTERS["accepted"] += steps
            COUNTERS["pos"][0] += steps
        spec = {  # vLLM 0.32's SpeculativeDecodingMetrics (summary level)
            "mean_acceptance_length": 2.0,
            "draft_acceptance_rate": 1 / K,
            "acceptance_histogram": [0, steps, 0, 0],
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": steps,
            "num_draft_tokens": K * steps,
            "num_spec_tokens": K,
        }
        self._send(
            200,
            json.dumps(
                {
                    "choices": [{"index": 0, "token_ids": out, "text": ""}],
                    "metrics": {"speculative_decoding": spec},
                }
            ),
        )


def main() -> None:
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    print("fake vLLM starting", flush=True)
    if MODE == "die":
        print("boom: the fake server died", flush=True)
        sys.exit(3)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
