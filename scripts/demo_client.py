#!/usr/bin/env python3
"""Chat with a running vSpec server and summarise what it did: the answers, the controller's
gamma choices (from its trace) and the vspec_ metrics.

    ./run.sh cpu-tiny --port 8765 --adaptive-trace .cache/trace.jsonl &
    .venv/bin/python scripts/demo_client.py --port 8765 --trace .cache/trace.jsonl

(scripts/demo.sh measures instead: target-only against vSpec, side by side.)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROMPTS = [
    "Write a Python function that reverses a list.",
    "import os\nimport sys\n\ndef main():",
    "class Config:\n    def __init__(self, path):",
    "Explain what a context manager does in Python.",
    "def fibonacci(n):",
    "for key, value in sorted(items.items()):",
]


def wait_ready(base: str, pid: int | None, log: str | None, timeout_s: float) -> None:
    """Poll /health, showing progress; fail early if the server process (when given) died."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    print(f"\ndemo: server ready after {time.monotonic() - start:.0f} s")
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        try:
            if pid is not None:
                os.kill(pid, 0)
        except ProcessLookupError:
            tail = ("".join(Path(log).read_text().splitlines(keepends=True)[-30:])
                    if log else "")
            sys.exit(f"\ndemo: the server exited during start-up; last lines of {log}:\n{tail}")
        print(".", end="", flush=True)
        time.sleep(2)
    sys.exit(f"\ndemo: server not ready after {timeout_s:.0f} s; see {log}")


def chat(base: str, model: str, prompt: str) -> str:
    body = json.dumps({
        "model": model, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 48, "temperature": 0,
    }).encode()
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        data = json.load(resp)
    return str(data["choices"][0]["message"]["content"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--server-pid", type=int, help="stop waiting if this process exits")
    parser.add_argument("--log", help="the server's log (its tail is shown if it exits)")
    parser.add_argument("--trace", default="", help="the server's --adaptive-trace file")
    parser.add_argument("--model", default="vspec-tiny")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    print("demo: waiting for the server", end="", flush=True)
    wait_ready(base, args.server_pid, args.log, args.timeout)
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(PROMPTS)) as pool:
        answers = list(pool.map(lambda p: chat(base, args.model, p), PROMPTS))
    print(f"demo: {len(PROMPTS)} concurrent chat requests in {time.monotonic() - t0:.1f} s")
    for prompt, answer in zip(PROMPTS, answers, strict=True):
        print(f"\n>>> {prompt.splitlines()[0]}\n{answer.strip()[:200]}")
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
        metrics = [ln for ln in resp.read().decode().splitlines()
                   if ln.startswith("vspec_") or ln.startswith("vllm:spec_decode_num_")]
    print("\ndemo: speculative-decoding metrics")
    print("\n".join(metrics) if metrics else "  (no vspec_ metrics found)")
    trace = Path(args.trace)
    if args.trace and trace.is_file():
        lines = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
        records = [r for r in lines if "step" in r]  # run headers left out
        counts = collections.Counter(r.get("gamma") for r in records)
        print(f"\ndemo: {len(records)} controller decisions so far; gamma chosen: "
              + ", ".join(f"{g}: {n}" for g, n in sorted(counts.items(), key=str)))
    else:
        print(f"\ndemo: no trace yet at {trace} (it is flushed in batches and at shutdown)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
