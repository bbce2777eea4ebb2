#!/usr/bin/env python3
"""Soak the cpu-tiny server as an operator would, then SIGTERM it under load.

Starts ``vllm-hust-vspec --protocol cpu-tiny`` (the launcher itself, on 127.0.0.1, with the
preset's 10 s drain timeout) with a trace, drives mixed traffic (chat and completions,
streaming or not, greedy and temperature-1, 1..N output tokens, client cancels mid-stream,
malformed and oversize requests), tries a second launch on the same port (it must fail fast and
leave the live server's metrics alone), sends SIGTERM to the server while a wave of requests is
in flight, and then checks what it left:

* every well-formed request answered (200), every bad one a clean 4xx;
* greedy answers identical whenever the same prompt comes back, whatever it was batched with;
* the trace holds one run header and every step 1..N without a gap, and its committed tokens
  equal the ``vspec_`` counters read post-mortem from the Prometheus folder.

Bounded in count and time; loopback only. Prints a summary (``--json`` for JSON); exit 1 when a
check fails. Example: ``.venv/bin/python scripts/soak_server.py --requests 400``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.metrics import Sample, parse_prometheus, scrape, total
from vllm_hust_vspec.bench.server import ServerProcess, free_port
from vllm_hust_vspec.launch.command import ServeCommand

ROOT = Path(__file__).resolve().parents[1]

MODEL = "vspec-tiny"
GREEDY_PROMPTS = [
    "def parse_args(argv):", "import collections\n\nclass Cache:", "for line in open(path):",
    "Write a function that sums a list.", "class Queue:\n    def __init__(self",
    "raise ValueError(\"", "if __name__ == '__main__':", "# Copyright 2001 Python Software",
]


@dataclass
class Tally:
    """What the traffic saw."""

    sent: int = 0
    ok: int = 0
    cancelled: int = 0
    bad_sent: int = 0
    bad_4xx: int = 0
    failures: list[str] = field(default_factory=list)
    greedy: dict[str, set[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str, detail: str = "") -> None:
        with self.lock:
            if kind == "ok":
                self.ok += 1
            elif kind == "cancelled":
                self.cancelled += 1
            elif kind == "bad_4xx":
                self.bad_4xx += 1
            else:
                self.failures.append(f"{kind}: {detail}"[:300])


def _post(port: int, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _good_request(rng: random.Random) -> tuple[str, dict[str, Any], str | None]:
    """A well-formed request; returns (path, body, greedy key or None)."""
    greedy = rng.random() < 0.4
    prompt = rng.choice(GREEDY_PROMPTS) if greedy else f"# note {rng.randrange(10**6)}\n"
    max_tokens = 24 if greedy else rng.randint(1, 96)
    body: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens,
                            "temperature": 0.0 if greedy else 1.0}
    if rng.random() < 0.5:
        body["messages"] = [{"role": "user", "content": prompt}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt
        path = "/v1/completions"
    if greedy:
        body["ignore_eos"] = True
    return path, body, (f"{path}|{prompt}" if greedy else None)


def _text_of(path: str, payload: dict[str, Any]) -> str:
    choice = payload["choices"][0]
    return str(choice["message"]["content"] if "chat" in path else choice["text"])


def _stream(port: int, path: str, body: dict[str, Any], cancel_after: int | None,
            timeout: float) -> tuple[str, str]:
    """Stream a request; ``cancel_after`` chunks then drop the connection. (kind, text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps({**body, "stream": True}).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return "http", f"{resp.status} {resp.read()[:200]!r}"
        parts: list[str] = []
        chunks = 0
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunks += 1
            if cancel_after is not None and chunks >= cancel_after:
                return "cancelled", ""
            choice = json.loads(line[6:])["choices"][0]
            parts.append(choice.get("delta", {}).get("content") or choice.get("text") or "")
        return "ok", "".join(parts)
    finally:
        conn.close()


def one_request(port: int, rng: random.Random, tally: Tally, timeout: float) -> None:
    """Send one request of a random kind and record what came back."""
    roll = rng.random()
    if roll < 0.08:  # malformed or oversize: must be a clean 4xx
        with tally.lock:
            tally.bad_sent += 1
        bad = rng.choice([
            b"{not json",
            json.dumps({"model": MODEL, "prompt": "x " * 5000, "max_tokens": 8}).encode(),
            json.dumps({"model": "no-such-model", "prompt": "x", "max_tokens": 4}).encode(),
            json.dumps({"model": MODEL, "prompt": "x", "max_tokens": -3}).encode(),
        ])
        try:
            status, _ = _post(port, "/v1/completions", bad, timeout)
        except OSError as exc:
            tally.add("error", f"bad request: {exc}")
            return
        tally.add("bad_4xx" if 400 <= status < 500 else "http", f"bad request -> {status}")
        return
    path, body, key = _good_request(rng)
    try:
        if roll < 0.50:
            cancel = rng.randint(1, 4) if (key is None and roll < 0.20) else None
            kind, text = _stream(port, path, body, cancel, timeout)
        else:
            status, raw = _post(port, path, json.dumps(body).encode(), timeout)
            kind, text = ("ok", _text_of(path, json.loads(raw))) if status == 200 else (
                "http", f"{status} {raw[:200]!r}")
    except (OSError, ValueError, KeyError) as exc:
        tally.add("error", f"{path}: {type(exc).__name__}: {exc}")
        return
    tally.add(kind, text)
    if kind == "ok" and key is not None:
        with tally.lock:
            tally.greedy.setdefault(key, set()).add(text)


def launcher_command(port: int, trace: Path, prom: Path | None, extra: list[str]) -> ServeCommand:
    """The launcher (not vllm directly): it is what operators run, and what takes the lock."""
    env = {"HUST_VSPEC_MODEL_DIR": str(ROOT / ".cache" / "models")}
    if prom is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(prom)
    argv = [sys.executable, "-m", "vllm_hust_vspec.cli.launch", "--protocol", "cpu-tiny",
            "--port", str(port), "--adaptive-trace", str(trace), *extra]
    return ServeCommand(argv=argv, env=env)


def second_launch(port: int, prom: Path | None) -> dict[str, Any]:
    """Start the launcher again on the live server's port, and with its metrics folder."""
    out: dict[str, Any] = {}
    for name, p, folder in (("same_port", port, prom), ("same_metrics_dir", free_port(), prom)):
        env = {**os.environ, "HUST_VSPEC_MODEL_DIR": str(ROOT / ".cache" / "models")}
        if name == "same_metrics_dir":
            env["PROMETHEUS_MULTIPROC_DIR"] = str(folder or default_prom_dir(port))
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "vllm_hust_vspec.cli.launch", "--protocol", "cpu-tiny",
             "--port", str(p)], env=env, capture_output=True, text=True, timeout=120)
        out[name] = {"exit": proc.returncode, "seconds": round(time.monotonic() - t0, 2),
                     "message": proc.stderr.strip().splitlines()[-1:] or [""]}
    return out


def default_prom_dir(port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"vllm-hust-vspec-prometheus-{port}"


def vspec_counters(samples: Mapping[Sample, float]) -> dict[str, float]:
    """Every ``vspec_*`` counter summed over its label sets."""
    names = {n for n, _ in samples if n.startswith("vspec_") and n.endswith("_total")}
    return {n: total(samples, n) for n in sorted(names)}


def post_mortem_metrics(folder: Path) -> dict[str, float]:
    """The vspec_ counters a dead server left in its multiprocess folder."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(folder))
    return vspec_counters(parse_prometheus(generate_latest(registry).decode()))


def drained(log: Path) -> bool:
    """Whether the EngineCore finished its requests before the process manager killed it."""
    text = log.read_text(errors="replace")
    done = text.find("request processing complete")
    killed = text.find("force killing remaining process EngineCore")
    return done >= 0 and (killed < 0 or done < killed)


def check_trace(path: Path) -> dict[str, Any]:
    """Runs, step continuity and committed tokens of the trace."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    headers = [r for r in lines if "run" in r and "step" not in r]
    steps = [r for r in lines if "step" in r]
    numbers = [int(r["step"]) for r in steps]
    return {
        "headers": len(headers),
        "steps": len(steps),
        "contiguous": numbers == list(range(1, len(numbers) + 1)),
        "tokens": sum(int(r["tokens"]) for r in steps),
        "gammas": dict(sorted(Counter(int(r["decided"]) for r in steps).items())),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the soak; exit 1 when a check fails."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=400, help="requests before the SIGTERM wave")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--wave", type=int, default=32,
                    help="requests in flight when SIGTERM is sent")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="bound on the traffic phase")
    ap.add_argument("--shutdown-timeout", type=int, default=10,
                    help="server drain timeout (the cpu-tiny preset's 10 s; 0 is vLLM's abort"
                    " mode, which kills the EngineCore at once, so the trace's last records"
                    " and the in-flight requests are lost)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None, help="keep logs and trace here")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)

    work = args.workdir or Path(tempfile.mkdtemp(prefix="vspec-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    trace, port = work / "trace.jsonl", free_port()
    prom = default_prom_dir(port)  # the launcher's own per-port folder, as operators get it
    server = ServerProcess("soak", launcher_command(
        port, trace, None, ["--shutdown-timeout", str(args.shutdown_timeout)]),
        work / "server.log")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HUST_VSPEC_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    print(f"soak: starting cpu-tiny on 127.0.0.1:{port} (log {server.log_path})", file=sys.stderr)
    server.start(env)
    summary: dict[str, Any] = {"port": port, "workdir": str(work)}
    tally = Tally()
    try:
        server.wait_ready(600)
        rng = random.Random(args.seed)
        seeds = [rng.randrange(2**32) for _ in range(args.requests + args.wave)]
        t0 = time.monotonic()
        deadline = t0 + args.max_seconds
        with ThreadPoolExecutor(args.concurrency) as pool:
            for i in range(args.requests):
                if time.monotonic() > deadline:
                    break
                tally.sent += 1
                pool.submit(one_request, port, random.Random(seeds[i]), tally, 300.0)
        summary["traffic_seconds"] = round(time.monotonic() - t0, 1)
        base = f"http://127.0.0.1:{port}"
        live = vspec_counters(scrape(base))
        summary["second_launch"] = second_launch(port, None)
        summary["metrics_kept"] = vspec_counters(scrape(base)).get(
            "vspec_gamma_steps_total", 0.0) >= live.get("vspec_gamma_steps_total", 0.0) > 0
        # the SIGTERM wave: long requests in flight, then the signal to the server's pid
        wave = ThreadPoolExecutor(args.wave)
        wave_tally = Tally()
        done_at: list[float] = []
        for i in range(args.wave):
            body = {"model": MODEL, "prompt": f"# wave {i}\n", "max_tokens": 400,
                    "temperature": 1.0, "ignore_eos": True}
            wave.submit(_wave_request, port, body, wave_tally, done_at)
        # signal once the first wave request is done: the rest is running or queued
        wait_until = time.monotonic() + 120
        while not done_at and time.monotonic() < wait_until:
            time.sleep(0.05)
        assert server.proc is not None
        t_term = time.monotonic()
        os.kill(server.proc.pid, signal.SIGTERM)
        code = server.proc.wait(timeout=120)
        summary["sigterm"] = {"exit": code, "seconds_to_exit": round(time.monotonic() - t_term, 1)}
        wave.shutdown(wait=True)
        summary["wave"] = {"sent": args.wave, "completed": wave_tally.ok,
                           "cut_off": len(wave_tally.failures),
                           "in_flight_at_sigterm": sum(t > t_term for t in done_at)}
    finally:
        server.stop(grace_s=10)
    summary["requests"] = {
        "sent": tally.sent, "ok": tally.ok, "cancelled": tally.cancelled,
        "bad_sent": tally.bad_sent, "bad_4xx": tally.bad_4xx,
        "failures": len(tally.failures), "failure_examples": tally.failures[:5],
    }
    summary["greedy_inconsistent"] = sorted(k for k, v in tally.greedy.items() if len(v) > 1)
    summary["greedy_prompts_repeated"] = sum(1 for v in tally.greedy.values() if v)
    summary["drained"] = drained(server.log_path)
    summary["trace"] = check_trace(trace)
    summary["post_mortem_metrics"] = post_mortem_metrics(prom)
    pm = summary["post_mortem_metrics"]
    tr = summary["trace"]
    checks = {
        "every good request answered": tally.failures == [],
        "every bad request a 4xx": tally.bad_4xx == tally.bad_sent,
        "greedy answers consistent": not summary["greedy_inconsistent"],
        "second launch refused fast": all(
            v["exit"] == 2 and v["seconds"] < 30 for v in summary["second_launch"].values()),
        "live metrics kept": bool(summary["metrics_kept"]),
        # How many in-flight requests vLLM's drain completes is the host's business (its HTTP
        # server may close connections before the engine finishes); the trace must be whole.
        "SIGTERM met requests in flight": summary["wave"]["in_flight_at_sigterm"] > 0,
        "trace: one run, no gap": tr["headers"] == 1 and tr["contiguous"] and tr["steps"] > 0,
        # Past --shutdown-timeout vLLM's process manager SIGKILLs the EngineCore mid-drain and
        # the unwritten tails of both are lost: the comparison below needs a finished drain.
        "drain finished within --shutdown-timeout": summary["drained"],
        "trace steps == metrics steps": tr["steps"] == pm.get("vspec_gamma_steps_total"),
        "trace tokens == metrics tokens": tr["tokens"] == pm.get("vspec_committed_tokens_total"),
    }
    summary["checks"] = checks
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        _print(summary)
    return 0 if all(checks.values()) else 1


def _wave_request(port: int, body: dict[str, Any], tally: Tally, done_at: list[float]) -> None:
    """A long request of the SIGTERM wave: "ok" only when it got all its tokens."""
    try:
        status, raw = _post(port, "/v1/completions", json.dumps(body).encode(), 120.0)
        done = status == 200 and (
            json.loads(raw)["usage"]["completion_tokens"] == body["max_tokens"])
        tally.add("ok" if done else "cut", str(status))
    except (OSError, ValueError, KeyError, http.client.HTTPException) as exc:
        tally.add("cut", type(exc).__name__)
    with tally.lock:
        done_at.append(time.monotonic())


def _print(summary: dict[str, Any]) -> None:
    r, tr = summary["requests"], summary["trace"]
    print(f"requests: {r['sent']} sent, {r['ok']} ok, {r['cancelled']} cancelled by the client, "
          f"{r['bad_4xx']}/{r['bad_sent']} bad ones answered 4xx, {r['failures']} failures "
          f"({summary.get('traffic_seconds')} s)")
    for example in r["failure_examples"]:
        print(f"  failure: {example}")
    print(f"greedy prompts answered more than once: {summary['greedy_prompts_repeated']}, "
          f"inconsistent: {len(summary['greedy_inconsistent'])}")
    for name, v in summary.get("second_launch", {}).items():
        print(f"second launch ({name}): exit {v['exit']} in {v['seconds']} s: {v['message'][0]}")
    print(f"SIGTERM under load: {summary.get('sigterm')}; wave {summary.get('wave')}")
    print(f"trace: {tr['headers']} run header(s), {tr['steps']} steps, contiguous "
          f"{tr['contiguous']}, {tr['tokens']} tokens; decided gamma {tr['gammas']}")
    print(f"post-mortem metrics: {summary['post_mortem_metrics']}")
    for name, ok in summary["checks"].items():
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}")


if __name__ == "__main__":
    sys.exit(main())
