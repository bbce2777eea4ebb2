"""Built-in load generator: streaming OpenAI ``/v1/completions`` requests from threads.

It measures what ``vllm bench serve`` measures (TTFT, TPOT, ITL, end-to-end latency,
throughput over the wall time of the whole load) with the standard library only, so it works
against any OpenAI-compatible server from a machine without vLLM. Output token counts come
from the server's ``usage`` (``stream_options.include_usage``), falling back to the number
of streamed chunks.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from vllm_hust_vspec.bench.datasets import BenchRequest
from vllm_hust_vspec.bench.stats import RequestOutcome

Progress = Callable[[int, int, float], None]  # (finished, total, elapsed_s)


@dataclass(frozen=True)
class LoadSpec:
    """How to send a list of requests."""

    base_url: str
    model: str
    temperature: float = 0.0
    request_rate: float = float("inf")  # requests/s (Poisson arrivals); inf: all at once
    max_concurrency: int | None = None
    ignore_eos: bool = True
    seed: int = 0
    timeout_s: float = 3600.0


class ServerError(RuntimeError):
    """The server could not be reached or answered unusably."""


def first_model(base_url: str, timeout_s: float = 10.0) -> str:
    """The id of the first model the server lists at ``/v1/models``."""
    url = f"{base_url.rstrip('/')}/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            data = json.loads(resp.read())
        return str(data["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ServerError(
            f"cannot list models at {url}: {exc}; is the server up (check --base-url)?"
        ) from None


def _connection(base_url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    u = urllib.parse.urlsplit(base_url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    host = u.hostname or "127.0.0.1"
    conn = cls(host, u.port, timeout=timeout_s)
    return conn, (u.path.rstrip("/") + "/v1/completions")


def send_one(spec: LoadSpec, req: BenchRequest, t0: float) -> RequestOutcome:
    """Stream one completion; never raises (failures come back as ``ok=False``)."""
    body = {
        "model": spec.model,
        "prompt": req.prompt,
        "max_tokens": req.output_tokens,
        "temperature": spec.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if spec.ignore_eos:
        body["ignore_eos"] = True
    start = time.perf_counter()
    ttft = 0.0
    last = start
    itl: list[float] = []
    chunks = 0
    usage: dict[str, Any] = {}
    conn, path = _connection(spec.base_url, spec.timeout_s)
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            text = resp.read().decode("utf-8", "replace")[:300]
            return RequestOutcome(ok=False, start_s=start - t0, error=f"HTTP {resp.status}: {text}")
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            data = json.loads(payload)
            if data.get("usage"):
                usage = data["usage"]
            choices = data.get("choices") or []
            if not choices or not choices[0].get("text"):
                continue
            now = time.perf_counter()
            if chunks == 0:
                ttft = now - start
            else:
                itl.append(now - last)
            last = now
            chunks += 1
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return RequestOutcome(ok=False, start_s=start - t0, error=f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()
    end = time.perf_counter()
    out_tokens = int(usage.get("completion_tokens") or chunks)
    if out_tokens == 0:
        return RequestOutcome(ok=False, start_s=start - t0, error="no tokens generated")
    return RequestOutcome(
        ok=True,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=out_tokens,
        start_s=start - t0,
        ttft_s=ttft,
        latency_s=end - start,
        itl_s=tuple(itl),
    )


def run_load(
    spec: LoadSpec, requests: Sequence[BenchRequest], progress: Progress | None = None
) -> tuple[list[RequestOutcome], float]:
    """Send every request (arrival process from ``spec``); returns outcomes and wall time."""
    n = len(requests)
    workers = max(1, min(spec.max_concurrency or n, n))
    rng = random.Random(spec.seed)
    outcomes: list[RequestOutcome | None] = [None] * n
    done = 0
    lock = threading.Lock()
    t0 = time.perf_counter()

    def work(i: int) -> None:
        nonlocal done
        outcomes[i] = send_one(spec, requests[i], t0)
        with lock:
            done += 1
            if progress is not None:
                progress(done, n, time.perf_counter() - t0)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vspec-bench") as pool:
        for i in range(n):
            if spec.request_rate != float("inf") and i > 0:
                time.sleep(rng.expovariate(spec.request_rate))
            pool.submit(work, i)
    duration = time.perf_counter() - t0
    return [o if o is not None else RequestOutcome(ok=False, error="not run") for o in outcomes], (
        duration
    )


__all__ = ["LoadSpec", "Progress", "ServerError", "first_model", "run_load", "send_one"]
