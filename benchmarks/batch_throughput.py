"""Loops completed per second by `loops.batch`, against a loopback LM server that takes 50 ms per answer.

The server (a separate process, threads, one answer every Creator–Critic role parses) stands in for an
LM server; each loop is a Creator–Critic–Iterator run of two LM calls (creator, an approving critic).
The ideal is latency-bound: `concurrency / (2 calls x 50 ms)` loops per second. Printed per backend and
concurrency: loops/s, and its share of the ideal.

    .venv/bin/python -m benchmarks.batch_throughput                      # asyncio at 16, 64, 256; ray at 16
    .venv/bin/python -m benchmarks.batch_throughput --backends asyncio --concurrency 256 --loops 2048
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CALLS_PER_LOOP = 2
SERVER = r'''
import http.server, json, socket, sys, time
LATENCY = float(sys.argv[1])
FIELDS = {"reasoning": "plan", "draft": "a draft", "accuracy_passed": True, "completeness_passed": True,
          "quality_passed": True, "feedback": "", "approved": True}
CONTENT = "\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in FIELDS.items()) + "\n\n[[ ## completed ## ]]"
BODY = json.dumps({"id": "1", "object": "chat.completion", "created": 1, "model": "loopback",
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": CONTENT}}],
                   "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}).encode()
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def setup(self):
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm holds the body until the
        # client's delayed ACK (40 ms), as real LM servers (uvicorn, llama-server) do not.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        time.sleep(LATENCY)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
'''


def measure(backend: str, concurrency: int, count: int, api_base: str) -> dict[str, float]:
    import dspy

    import loops.batch
    from loops import CreatorCriticIterator, RetryPolicy

    lm = dspy.LM("openai/loopback", api_base=api_base, api_key="unused", cache=False, num_retries=0)
    examples = [{"id": n, "requirements": f"note {n}"} for n in range(count)]
    with tempfile.TemporaryDirectory() as folder, dspy.context(lm=lm):
        summary = loops.batch.run(CreatorCriticIterator(retry=RetryPolicy(backoff_s=0)), examples,
                                  out=Path(folder) / "results.jsonl", backend=backend, concurrency=concurrency,
                                  progress=False)
    return {"loops_per_s": summary.per_second, "failed": summary.failed, "succeeded": summary.succeeded}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch_throughput",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="asyncio,ray")
    parser.add_argument("--concurrency", default="16,64,256")
    parser.add_argument("--ray-concurrency", default="16", help="concurrencies for the ray backend")
    parser.add_argument("--loops", type=int, default=None, help="loops per measurement (default: 4 x concurrency, "
                        "at least 128)")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per LM answer (default: 0.05)")
    args = parser.parse_args(argv)

    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.latency)], stdout=subprocess.PIPE, text=True)
    try:
        api_base = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        rows = []
        for backend in args.backends.split(","):
            levels = args.ray_concurrency if backend == "ray" else args.concurrency
            if backend == "ray":
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            for concurrency in (int(level) for level in levels.split(",")):
                count = args.loops or max(128, 4 * concurrency)
                measure(backend, concurrency, min(count, 2 * concurrency), api_base)  # warm-up: imports, pools
                started = time.monotonic()
                found = measure(backend, concurrency, count, api_base)
                ideal = concurrency / (CALLS_PER_LOOP * args.latency)
                rows.append({"backend": backend, "concurrency": concurrency, "loops": count,
                             "loops_per_s": round(found["loops_per_s"], 1), "ideal": round(ideal, 1),
                             "share_of_ideal": round(found["loops_per_s"] / ideal, 3),
                             "failed": found["failed"], "seconds": round(time.monotonic() - started, 1)})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.kill()
    print(f"\n{'backend':<8} {'concurrency':>11} {'loops/s':>9} {'ideal':>8} {'share':>7}")
    for row in rows:
        print(f"{row['backend']:<8} {row['concurrency']:>11} {row['loops_per_s']:>9} {row['ideal']:>8} "
              f"{row['share_of_ideal']:>7.1%}")


if __name__ == "__main__":
    main()
