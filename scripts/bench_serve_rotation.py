#!/usr/bin/env python3
"""Per-step serving cost, measured side by side: live servers, closed-loop bursts, rotated.

Starts a protocol's target-only server and its vSpec server (and, with ``--other-src``, a
second vSpec server running the plugin from another source tree, e.g. a ``git worktree`` of
an older commit) and keeps them all alive. Each round sends every server, one after the
other, the same closed-loop burst (``--concurrency`` clients, each ``--requests`` greedy
requests of ``--output-len`` tokens, ``ignore_eos``); the order rotates every round, so no
server always runs first or right after another. Idle servers do not spin. Prints each
round's tokens/s, each server's median, and the paired ratios to target-only (the median over
rounds of the per-round ratio). On a machine whose speed drifts, single bursts mislead: use
the medians, and enough rounds that the ratios settle.

Where ``vllm-hust-vspec-bench pair`` measures an open-loop load on fresh servers, this
measures the steady per-step cost at a full batch, where the controller has settled.

    .venv/bin/python scripts/bench_serve_rotation.py [--protocol cpu-tiny] [--rounds 12]
        [--other-src /path/to/old/checkout/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vllm_hust_vspec.bench.client import LoadSpec, run_load  # noqa: E402
from vllm_hust_vspec.bench.datasets import random_prompts  # noqa: E402
from vllm_hust_vspec.bench.server import (  # noqa: E402
    PROM_ENV,
    ServerProcess,
    baseline_command,
    for_run,
    free_port,
)
from vllm_hust_vspec.launch.command import build_serve_command  # noqa: E402
from vllm_hust_vspec.launch.models import with_checkout_model_dir  # noqa: E402
from vllm_hust_vspec.settings import resolve_settings  # noqa: E402


def burst(base_url: str, model: str, concurrency: int, requests: int, output_len: int,
          seed: int) -> float:
    """Output tokens/s of ``concurrency`` clients sending ``requests`` requests each (the
    built-in client, closed loop: every client sends its next request when one returns)."""
    reqs = random_prompts(concurrency * requests, 100, output_len, seed)
    outcomes, wall = run_load(LoadSpec(base_url=base_url, model=model,
                                       max_concurrency=concurrency, seed=seed), reqs)
    failed = [o.error for o in outcomes if not o.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} requests to {base_url} failed: {failed[0]}")
    return sum(o.output_tokens for o in outcomes) / wall


def main(argv: list[str] | None = None) -> int:
    """Start the servers, run the rotated rounds, print the table; servers always stop."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", default="cpu-tiny", help="preset (default cpu-tiny)")
    parser.add_argument("--rounds", type=int, default=12, help="rounds (default 12)")
    parser.add_argument("--concurrency", type=int, default=8, help="clients (default 8)")
    parser.add_argument("--requests", type=int, default=4,
                        help="requests per client per burst (default 4)")
    parser.add_argument("--output-len", type=int, default=128, help="tokens per request")
    parser.add_argument("--other-src", type=Path, default=None,
                        help="also serve vSpec with the plugin imported from this source tree "
                             "(a src/ directory; put first on PYTHONPATH)")
    parser.add_argument("--server-timeout", type=float, default=900.0,
                        help="seconds to wait for each server to be ready")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.concurrency < 1 or args.requests < 1:
        parser.error("--rounds, --concurrency and --requests must be >= 1")
    if args.other_src is not None and not (args.other_src / "vllm_hust_vspec").is_dir():
        parser.error(f"--other-src {args.other_src}: no vllm_hust_vspec package in it")

    env, _ = with_checkout_model_dir(os.environ)
    resolved = resolve_settings(preset=args.protocol, cli={}, env=env)
    vspec = build_serve_command(resolved, env, [])
    commands = {"target-only": baseline_command(vspec), "vspec": vspec}
    if args.other_src is not None:
        commands["vspec@other-src"] = replace(
            vspec, env={**vspec.env, "PYTHONPATH": str(args.other_src.resolve())})
    model = resolved.settings.served_model_name or "model"
    work = Path(tempfile.mkdtemp(prefix="vspec-rotation-"))
    servers: dict[str, ServerProcess] = {}
    try:
        for name, cmd in commands.items():
            server = ServerProcess(name=name, log_path=work / f"{name}.log",
                                   command=for_run(cmd, free_port(), {PROM_ENV: str(work / name)}))
            server.start(env)
            servers[name] = server
            print(f"starting {name} (log {server.log_path}) ...", flush=True)
            server.wait_ready(args.server_timeout)
            burst(server.base_url, model, args.concurrency, 1, args.output_len, 0)  # warm-up
        names = list(servers)
        rows: list[dict[str, float]] = []
        print("round  " + "  ".join(f"{n:>16s}" for n in names))
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            row = {n: burst(servers[n].base_url, model, args.concurrency, args.requests,
                            args.output_len, r + 1) for n in order}
            rows.append(row)
            print(f"{r + 1:5d}  " + "  ".join(f"{row[n]:16.1f}" for n in names), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    print("median " + "  ".join(f"{statistics.median(x[n] for x in rows):16.1f}" for n in names))
    for n in names[1:]:
        ratios = [x[n] / x["target-only"] for x in rows]
        print(f"{n} / target-only: paired median {statistics.median(ratios):.3f} "
              f"(rounds {min(ratios):.3f}-{max(ratios):.3f})")
    if "vspec@other-src" in names:
        ratios = [x["vspec"] / x["vspec@other-src"] for x in rows]
        print(f"vspec / vspec@other-src: paired median {statistics.median(ratios):.3f}")
    print(f"server logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
