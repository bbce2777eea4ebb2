#!/usr/bin/env python3
"""Side-by-side half of scripts/demo.sh: target-only against vSpec on two tiny model pairs.

For each pair it takes both server commands from ``vllm-hust-vspec-bench pair --dry-run
--json`` (so the two arms differ only in speculation, as in the project's pair bench), starts
the target-only server, then the vSpec server once the first is ready (so vSpec's start-up
calibration times its steps on a quiet machine), and keeps both up. Every round sends the same
closed-loop load to each (``vllm-hust-vspec-bench run``: same seeded prompts, fixed output
length, concurrency 8), the arms alternating A B B A ...; one unmeasured warm-up round per arm
comes first. It prints a table (median tokens/s of each arm, their ratio, the gamma the
controller played most in the measured rounds) and writes a figure (throughput per round,
gamma over time from the controller trace).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BENCH = str(BIN / "vllm-hust-vspec-bench")
ARMS = ("baseline", "vspec")
LABEL = {"baseline": "target-only", "vspec": "vSpec"}


@dataclass
class Pair:
    key: str
    title: str
    flags: list[str]
    bar: float  # the ratio vSpec / target-only the demo expects at least


PAIRS = [
    Pair("pays", "target-deep + draft-cheap-agree (speculation pays)",
         ["--target-model", "vspec-tiny/target-deep",
          "--draft-model", "vspec-tiny/draft-cheap-agree"], 1.3),
    Pair("no-pay", "target + draft, cpu-tiny as is (it does not)", [], 0.9),
]


@dataclass
class Server:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    ready_s: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **self.env},
                                         start_new_session=True)

    def wait_ready(self, timeout_s: float) -> None:
        assert self.proc is not None
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
                sys.exit(f"demo: the {self.name} server exited during start-up; last lines of "
                         f"{self.log}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        self.ready_s = time.monotonic() - t0
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1)
        sys.exit(f"demo: the {self.name} server was not ready after {timeout_s:.0f} s; "
                 f"see {self.log}")

    def stop(self) -> None:
        """SIGINT the server's process group (EngineCore included), SIGKILL if it lingers."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGINT, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@dataclass
class PairResult:
    pair: Pair
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {a: [] for a in ARMS})
    trace: Path | None = None
    ready_s: dict[str, float] = field(default_factory=dict)

    def tps(self, arm: str) -> list[float]:
        return [float(r["output_throughput"]) for r in self.runs[arm]]

    def median(self, arm: str) -> float:
        return statistics.median(self.tps(arm))

    def ratio(self) -> float:
        return self.median("vspec") / self.median("baseline")

    def gamma_steps(self) -> dict[int, float]:
        """Steps per gamma over the measured vSpec rounds (vspec_ metrics windows)."""
        out: dict[int, float] = {}
        for r in self.runs["vspec"]:
            for g, n in ((r.get("spec") or {}).get("gamma_steps") or {}).items():
                out[int(g)] = out.get(int(g), 0.0) + float(n)
        return out

    def settled(self) -> tuple[int | None, float]:
        steps = self.gamma_steps()
        total = sum(steps.values())
        if not total:
            return None, 0.0
        g = max(steps, key=lambda k: steps[k])
        return g, steps[g] / total


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_port(argv: list[str], port: int) -> list[str]:
    out = list(argv)
    if "--port" in out:
        out[out.index("--port") + 1] = str(port)
    else:
        out += ["--port", str(port)]
    return out


def plan_commands(preset: str, pair: Pair, extra: list[str]) -> dict[str, Any]:
    """Both arms' commands and environments, as the project's pair bench would run them."""
    argv = [BENCH, "pair", "--protocol", preset, *pair.flags, *extra, "--dry-run", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"demo: {' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")
    return dict(json.loads(proc.stdout)["commands"])


def measure(server: Server, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One closed-loop load with the project's client; the run's result dict."""
    shutil.rmtree(out, ignore_errors=True)
    argv = [BENCH, "run", "--base-url", server.url, "--model", args.model,
            "--backend", "builtin", "--dataset", "random", "--seed", str(args.seed),
            "--num-prompts", str(args.num_prompts), "--output-len", str(args.output_len),
            "--random-input-len", str(args.input_len),
            "--max-concurrency", str(args.concurrency), "--warmup-prompts", "0",
            "--result-dir", str(out), "--quiet"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    result = out / "run.json"
    if proc.returncode != 0 or not result.is_file():
        sys.exit(f"demo: the load against {server.name} failed:\n{proc.stdout}{proc.stderr}")
    return dict(json.loads(result.read_text()))


def run_pair(pair: Pair, args: argparse.Namespace, work: Path) -> PairResult:
    cmds = plan_commands(args.preset, pair, args.extra)
    res = PairResult(pair)
    res.trace = work / f"{pair.key}.trace.jsonl"
    res.trace.unlink(missing_ok=True)
    servers: dict[str, Server] = {}
    for arm in ARMS:
        prom = work / "prometheus" / f"{pair.key}-{arm}"
        shutil.rmtree(prom, ignore_errors=True)
        prom.mkdir(parents=True)
        env = {**cmds[arm]["env"], "PROMETHEUS_MULTIPROC_DIR": str(prom)}
        if arm == "vspec":
            env["HUST_VSPEC_ADAPTIVE_TRACE"] = str(res.trace)
        port = free_port()
        servers[arm] = Server(f"{pair.key} {LABEL[arm]}", with_port(cmds[arm]["argv"], port),
                              env, work / f"{pair.key}-{arm}.server.log", port)
    try:
        for arm in ARMS:  # one at a time: vSpec's start-up calibration sees a quiet machine
            print(f"demo: [{pair.key}] starting the {LABEL[arm]} server ...", flush=True)
            servers[arm].start()
            servers[arm].wait_ready(args.server_timeout)
            res.ready_s[arm] = servers[arm].ready_s
            print(f"demo: [{pair.key}] {LABEL[arm]} ready after {servers[arm].ready_s:.0f} s "
                  f"on {servers[arm].url}", flush=True)
        for arm in ARMS:  # warm-up round, not measured
            measure(servers[arm], args, work / "runs" / f"{pair.key}-{arm}-warmup")
        for rnd in range(1, args.rounds + 1):
            order = ARMS if rnd % 2 else ARMS[::-1]
            line = []
            for arm in order:
                r = measure(servers[arm], args, work / "runs" / f"{pair.key}-{arm}-r{rnd}")
                r["round"] = rnd
                res.runs[arm].append(r)
                line.append(f"{LABEL[arm]} {r['output_throughput']:.0f}")
            print(f"demo: [{pair.key}] round {rnd}/{args.rounds}: {', '.join(line)} tok/s",
                  flush=True)
    finally:
        for arm in ARMS[::-1]:
            servers[arm].stop()
    return res


def read_trace(path: Path | None) -> list[dict[str, Any]]:
    if path is None or not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict) and "step" in rec and "t" in rec:
                out.append(rec)
    return out


def plot(results: list[PairResult], path: Path) -> str | None:
    """Throughput per round (top) and the controller's gamma over time (bottom), per pair."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install vllm-hust-vspec[bench])"
    fig, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 7), squeeze=False)
    for col, res in enumerate(results):
        ax = axes[0][col]
        for arm, color in (("baseline", "tab:gray"), ("vspec", "tab:blue")):
            rounds = [r["round"] for r in res.runs[arm]]
            ax.plot(rounds, res.tps(arm), marker="o", color=color,
                    label=f"{LABEL[arm]} (median {res.median(arm):.0f})")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("measured round")
        ax.set_ylabel("output tokens/s")
        ax.set_title(f"{res.pair.title}\nvSpec / target-only {res.ratio():.2f}x",
                     fontsize="medium")
        ax.legend(fontsize="small")
        ax = axes[1][col]
        recs = read_trace(res.trace)
        if recs:
            ax.step(range(1, len(recs) + 1),
                    [int(r.get("decided", r.get("gamma", 0))) for r in recs],
                    where="post", linewidth=0.8)
        ax.set_ylim(-0.3, max([4] + [int(r.get("decided", 0)) for r in recs]) + 0.3)
        ax.set_xlabel("controller step (warm-up round included)")
        ax.set_ylabel("gamma decided")
        ax.set_title("the vSpec controller's gamma", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def table(results: list[PairResult]) -> str:
    head = ("pair", "target-only tok/s", "vSpec tok/s", "vSpec/target", "gamma settled",
            "expected")
    rows = []
    for res in results:
        g, share = res.settled()
        ok = res.ratio() >= res.pair.bar
        rows.append((
            res.pair.title,
            f"{res.median('baseline'):.0f}", f"{res.median('vspec'):.0f}",
            f"{res.ratio():.2f}x",
            "?" if g is None else f"{g} ({share:.0%} of steps)",
            f">= {res.pair.bar:.1f}x {'ok' if ok else 'MISSED'}",
        ))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)),
                      *(fmt.format(*r) for r in rows)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu-tiny")
    parser.add_argument("--model", default="vspec-tiny", help="served model name")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per arm")
    parser.add_argument("--num-prompts", type=int, default=32, help="requests per round")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--input-len", type=int, default=64, help="words per random prompt")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", default="pays,no-pay", help="which pairs, in order")
    parser.add_argument("--out", default=str(ROOT / ".cache" / "demo"))
    parser.add_argument("--server-timeout", type=float, default=300.0)
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a pair misses its expected ratio")
    parser.add_argument("extra", nargs="*",
                        help="extra vllm-hust-vspec flags for both pairs (after --)")
    args = parser.parse_args()
    work = Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HUST_VSPEC_MODEL_DIR", str(ROOT / ".cache" / "models"))
    by_key = {p.key: p for p in PAIRS}
    pairs = [by_key[k] for k in args.pairs.split(",") if k]
    print(f"demo: per round and arm {args.num_prompts} requests x {args.output_len} tokens, "
          f"{args.concurrency} in flight, same prompts for both arms; 1 warm-up round + "
          f"{args.rounds} measured rounds per arm, order A B B A ...", flush=True)
    t0 = time.monotonic()
    results = [run_pair(p, args, work) for p in pairs]
    (work / "summary.json").write_text(json.dumps([
        {"pair": r.pair.key, "title": r.pair.title, "expected": r.pair.bar,
         "target_only_tps": r.tps("baseline"), "vspec_tps": r.tps("vspec"),
         "ratio": r.ratio(), "gamma_steps": r.gamma_steps(), "ready_s": r.ready_s}
        for r in results], indent=1) + "\n")
    fig = work / "side-by-side.png"
    why_not = plot(results, fig)
    print(f"\ndemo: medians over {args.rounds} measured rounds per arm "
          f"({time.monotonic() - t0:.0f} s for both pairs)\n")
    print(table(results))
    print(f"\nplot: {fig}" if why_not is None else f"\nplot: not written ({why_not})")
    print(f"logs, per-round results, traces: {work}")
    missed = [r for r in results if r.ratio() < r.pair.bar]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
