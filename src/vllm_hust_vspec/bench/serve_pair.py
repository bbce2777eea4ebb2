"""Shared by the scripts that serve both arms side by side (demo_side_by_side.py,
profile_serve_steps.py, bench_refill_open_loop.py): the bundled tiny
pairs, both arms' server commands as the pair bench builds them, one seeded load from the
project's client, and the profile scripts' load options."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_hust_vspec.launch.command import ServeCommand

BENCH = str(Path(sys.executable).parent / "vllm-hust-vspec-bench")
ARMS = ("baseline", "vspec")
LABEL = {"baseline": "target-only", "vspec": "vSpec"}


@dataclass(frozen=True)
class Pair:
    """A bundled tiny model pair on the cpu-tiny preset: its launcher flags, and the least
    vSpec / target-only ratio the demo expects of it."""

    key: str
    title: str
    flags: tuple[str, ...]
    expected: float


PAIRS = (
    Pair("pays", "target-deep + draft-cheap-agree (speculation pays)",
         ("--target-model", "vspec-tiny/target-deep",
          "--draft-model", "vspec-tiny/draft-cheap-agree"), 1.3),
    Pair("no-pay", "target + draft, the preset's pair (it does not)", (), 0.9),
)


def pair_commands(pair_args: Sequence[str], who: str) -> dict[str, ServeCommand]:
    """Both arms' commands and environments from ``vllm-hust-vspec-bench pair PAIR_ARGS
    --dry-run --json``: they differ only in speculation. ``who`` names the caller in errors."""
    argv = [BENCH, "pair", *pair_args, "--dry-run", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{who}: {' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")
    cmds = json.loads(proc.stdout)["commands"]
    return {arm: ServeCommand(argv=cmds[arm]["argv"], env=cmds[arm]["env"]) for arm in ARMS}


def bench_run(base_url: str, load_args: Sequence[str], out: Path, who: str) -> dict[str, Any]:
    """One load with ``vllm-hust-vspec-bench run`` (builtin client, random prompts) and
    ``load_args`` (model, seed, sizes, concurrency or rate, warm-up); the run's result dict,
    written under ``out`` (emptied first)."""
    shutil.rmtree(out, ignore_errors=True)
    argv = [BENCH, "run", "--base-url", base_url, "--backend", "builtin", "--dataset", "random",
            *load_args, "--result-dir", str(out), "--quiet"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    result = out / "run.json"
    if proc.returncode != 0 or not result.is_file():
        raise SystemExit(f"{who}: the load against {base_url} failed:\n"
                         f"{proc.stdout}{proc.stderr}")
    return dict(json.loads(result.read_text()))


def add_load_args(ap: argparse.ArgumentParser, *, num_prompts: int, warmup_prompts: int,
                  work: str) -> None:
    """The options of a script that serves both arms of one preset under one seeded open-loop
    load (read back with :func:`parse_load_args`); ``work`` is the default work folder."""
    ap.add_argument("--protocol", default="cpu-tiny", help="preset of both servers (cpu-tiny)")
    ap.add_argument("--num-prompts", type=int, default=num_prompts)
    ap.add_argument("--warmup-prompts", type=int, default=warmup_prompts)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--request-rate", type=float, default=16.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--server-timeout", type=float, default=600.0)
    ap.add_argument("--work", type=Path, default=Path(work))
    ap.add_argument("server_args", nargs=argparse.REMAINDER,
                    help="after --: flags for both arms' servers (as for bench pair)")


def parse_load_args(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """``ap``'s arguments, the servers' flags without their leading ``--``."""
    args = ap.parse_args()
    if args.server_args[:1] == ["--"]:
        args.server_args = args.server_args[1:]
    return args


def load(url: str, args: argparse.Namespace, out: Path, *, warmup: bool, who: str
         ) -> dict[str, Any]:
    """One seeded open-loop load of :func:`add_load_args`' options (``--warmup-prompts`` of
    them when ``warmup``) with the project's client; its result dict."""
    n = args.warmup_prompts if warmup else args.num_prompts
    return bench_run(url, ["--seed", str(args.seed), "--num-prompts", str(n),
                           "--output-len", str(args.output_len),
                           "--random-input-len", str(args.input_len),
                           "--request-rate", str(args.request_rate), "--warmup-prompts", "0"],
                     out, who)
