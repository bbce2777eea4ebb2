#!/usr/bin/env python3
"""What vSpec's data-parallel gamma agreement costs per lockstep step.

Two measurements:

* ``isolated``: ``--ranks`` processes on this machine build vSpec's agreement exactly as the
  engines do (a gloo group on a TCP store, host/engine/dp_agreement.py) and run ``--steps``
  agreements back to back with random votes: the cost of the collective itself, no waiting
  for a slower peer.
* ``--log SERVER_LOG``: the per-rank summaries a served run logs at shutdown ("DP agreement
  rank ..."): wall time inside the agreement per step (this includes waiting for the slower
  rank, which vLLM's own DP collectives would wait in the same step anyway) and the busy
  lockstep step time.

The ratio is the agreement's time over the step time (``--step-ms``, else the log's).

Usage: ``python scripts/dp_agreement_cost.py [--ranks 2] [--steps 2000] [--log PATH]
[--step-ms MS] [--json]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import re
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SUMMARY = re.compile(r"DP agreement rank (\d+)/(\d+): (\d+) steps, .* (\d+) us/step inside the "
                     r"agreement, busy step ([0-9.]+) ms")


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank(rank: int, size: int, port: int, steps: int, out: Any) -> None:
    import torch.distributed as dist

    from vllm_hust_vspec.host.engine import dp_agreement

    store = dist.TCPStore("127.0.0.1", port, size, rank == 0, wait_for_workers=False)
    agreement = dp_agreement.DPAgreement(
        dp_agreement.make_group(store, rank, size), store, rank, size, max_gamma=5)
    rng = random.Random(rank)
    for _ in range(50):  # warm-up: connections, first allocations
        agreement.agree(rng.randint(0, 5), rng.randint(0, 8))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        agreement.agree(rng.randint(0, 5), rng.randint(0, 8))
        times.append(time.perf_counter() - start)
    out.put((rank, statistics.median(times), statistics.mean(times), agreement.digest))


def isolated(ranks: int, steps: int) -> dict[str, Any]:
    """Median and mean seconds per agreement over ``ranks`` local processes."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _port()
    procs = [ctx.Process(target=_rank, args=(r, ranks, port, steps, out)) for r in range(ranks)]
    for p in procs:
        p.start()
    rows = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    digests = {row[3] for row in rows}
    if len(digests) != 1:
        raise SystemExit(f"ranks ran different gamma sequences: digests {sorted(digests)}")
    return {"ranks": ranks, "steps": steps,
            "median_us": max(row[1] for row in rows) * 1e6,
            "mean_us": max(row[2] for row in rows) * 1e6}


def from_log(path: Path) -> list[dict[str, Any]]:
    """The per-rank summaries of a served run's log."""
    return [{"rank": int(m[1]), "size": int(m[2]), "steps": int(m[3]),
             "agree_us": float(m[4]), "step_ms": float(m[5])}
            for m in SUMMARY.finditer(path.read_text(errors="replace"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--log", type=Path, help="a served run's log with the DP summaries")
    ap.add_argument("--step-ms", type=float, help="the lockstep step time to compare with")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {"isolated": isolated(args.ranks, args.steps)}
    served = from_log(args.log) if args.log else []
    if args.log and not served:
        raise SystemExit(f"{args.log}: no 'DP agreement rank' summary (the server logs it at "
                         "shutdown; stop it with SIGINT)")
    report["served"] = served
    step_ms = args.step_ms or (max(r["step_ms"] for r in served) if served else None)
    if step_ms:
        report["step_ms"] = step_ms
        report["ratio_isolated"] = report["isolated"]["median_us"] / 1e3 / step_ms
        if served:
            report["ratio_served"] = max(r["agree_us"] for r in served) / 1e3 / step_ms
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    iso = report["isolated"]
    print(f"isolated: {iso['ranks']} ranks, {iso['steps']} agreements: median "
          f"{iso['median_us']:.0f} us, mean {iso['mean_us']:.0f} us per step")
    for r in served:
        print(f"served rank {r['rank']}/{r['size']}: {r['steps']} steps, {r['agree_us']:.0f} us "
              f"inside the agreement per step (waiting for the peer included), busy step "
              f"{r['step_ms']:.2f} ms")
    if step_ms:
        print(f"ratio to a {step_ms:.2f} ms step: isolated {report['ratio_isolated']:.4f}"
              + (f", served {report['ratio_served']:.4f}" if served else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
