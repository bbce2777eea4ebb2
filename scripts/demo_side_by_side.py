#!/usr/bin/env python3
"""Side-by-side half of scripts/demo.sh: target-only against vSpec on two tiny model pairs.

Both arms' server commands come from ``vllm-hust-vspec-bench pair --dry-run --json``, so they
differ only in speculation, as in the project's pair bench. The target-only servers start
together, then the vSpec servers one at a time (each one's start-up calibration times its
steps while the others sit idle); all stay up until the end. Every round sends the same
closed-loop load to both arms of a pair back to back (``vllm-hust-vspec-bench run``: the same
seeded prompts, a fixed output length, 8 requests in flight), the order alternating
A B B A ...; one unmeasured warm-up round per server comes first.

Two things keep the comparison fair on a small CPU host, and apply to both arms alike:

* the servers stay in this script's session, so the kernel's per-session scheduling groups
  (autogroup) do not set the load client against the server as two equal halves of the CPUs;
* each worker runs one OpenMP thread (the cpu-tiny preset pins it; ``--omp-threads N`` sets
  another count for both arms through the pair bench's ``--config``): with two cores the API
  server, the engine core and the client need CPU besides the worker.

The table shows the median tokens/s of each arm over the measured rounds, their ratio (as
``vllm-hust-vspec-bench pair`` reports it) and the gamma the controller played on most steps
of the measured rounds (from the vspec_ metrics of each round). The figure shows tokens/s per
round and the share of steps at each gamma per round, the warm-up round included.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.serve_pair import ARMS, LABEL, PAIRS, Pair, bench_run, pair_commands
from vllm_hust_vspec.bench.server import ServerProcess, ServerStartError, for_run
from vllm_hust_vspec.launch.command import ServeCommand

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class PairResult:
    pair: Pair
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {a: [] for a in ARMS})
    warmup: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready_s: dict[str, float] = field(default_factory=dict)

    def tps(self, arm: str) -> list[float]:
        return [float(r["output_throughput"]) for r in self.runs[arm]]

    def median(self, arm: str) -> float:
        return statistics.median(self.tps(arm))

    def round_ratios(self) -> list[float]:
        """vSpec / target-only of each round (its two runs ran back to back)."""
        return [v / b for b, v in zip(self.tps("baseline"), self.tps("vspec"), strict=True)]

    def ratio(self) -> float:
        """Median vSpec / median target-only (what ``vllm-hust-vspec-bench pair`` reports)."""
        return self.median("vspec") / self.median("baseline")

    def gamma_steps(self, runs: list[dict[str, Any]] | None = None) -> dict[int, float]:
        """Steps per gamma over vSpec runs (default: the measured ones), from vspec_ metrics."""
        out: dict[int, float] = {}
        for r in self.runs["vspec"] if runs is None else runs:
            for g, n in ((r.get("spec") or {}).get("gamma_steps") or {}).items():
                out[int(g)] = out.get(int(g), 0.0) + float(n)
        return out

    def settled(self) -> tuple[int | None, float]:
        """The gamma of most measured steps and its share of them."""
        steps = self.gamma_steps()
        total = sum(steps.values())
        if not total:
            return None, 0.0
        g = max(steps, key=lambda k: steps[k])
        return g, steps[g] / total

    def to_dict(self) -> dict[str, Any]:
        return {"pair": self.pair.key, "title": self.pair.title, "flags": list(self.pair.flags),
                "expected": self.pair.expected, "target_only_tps": self.tps("baseline"),
                "vspec_tps": self.tps("vspec"), "round_ratios": self.round_ratios(),
                "ratio": self.ratio(), "gamma_steps": self.gamma_steps(),
                "warmup_gamma_steps": self.gamma_steps([self.warmup.get("vspec", {})]),
                "ready_s": self.ready_s}


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Share of the CPUs busy over ``seconds`` (from /proc/stat; None where there is none)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as fh:
            ticks = [int(x) for x in fh.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def plan_commands(args: argparse.Namespace, pair: Pair, work: Path) -> dict[str, ServeCommand]:
    """Both arms' commands and environments, as the project's pair bench would run them."""
    pair_args = ["--protocol", args.preset, *pair.flags]
    if args.omp_threads > 0:
        overlay = work / "demo-overlay.toml"
        overlay.write_text(f'[env]\nOMP_NUM_THREADS = "{args.omp_threads}"\n')
        pair_args += ["--config", str(overlay)]
    return pair_commands([*pair_args, *args.extra], "demo")


def make_servers(pair: Pair, args: argparse.Namespace, work: Path
                 ) -> dict[str, ServerProcess]:
    """Both arms' servers of a pair (not started; each takes a free port when it starts) with
    a fresh metrics directory."""
    cmds = plan_commands(args, pair, work)
    servers: dict[str, ServerProcess] = {}
    for arm in ARMS:
        prom = work / "prometheus" / f"{pair.key}-{arm}"
        shutil.rmtree(prom, ignore_errors=True)
        prom.mkdir(parents=True)
        servers[arm] = ServerProcess(
            f"{pair.key} {LABEL[arm]}",
            for_run(cmds[arm], None, {"PROMETHEUS_MULTIPROC_DIR": str(prom)}),
            work / f"{pair.key}-{arm}.server.log", any_port=True)
    return servers


def measure(server: ServerProcess, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One closed-loop load with the project's client; the run's result dict."""
    return bench_run(server.base_url, [
        "--model", args.model, "--seed", str(args.seed), "--num-prompts", str(args.num_prompts),
        "--output-len", str(args.output_len), "--random-input-len", str(args.input_len),
        "--max-concurrency", str(args.concurrency),
        "--warmup-prompts", str(args.warmup_prompts)], out, f"demo ({server.name})")


def run_rounds(res: PairResult, servers: dict[str, ServerProcess], args: argparse.Namespace,
               work: Path) -> None:
    key = res.pair.key
    for arm in ARMS:  # warm-up round, not measured
        res.warmup[arm] = measure(servers[arm], args, work / "runs" / f"{key}-{arm}-warmup")
    for rnd in range(1, args.rounds + 1):
        order = ARMS if rnd % 2 else ARMS[::-1]
        for arm in order:
            r = measure(servers[arm], args, work / "runs" / f"{key}-{arm}-r{rnd}")
            r["round"] = rnd
            res.runs[arm].append(r)
        b, v = (res.runs[a][-1]["output_throughput"] for a in ARMS)
        print(f"demo: [{key}] round {rnd:2d}/{args.rounds} ({LABEL[order[0]]} first): "
              f"target-only {b:5.0f}, vSpec {v:5.0f} tok/s, {v / b:.2f}x", flush=True)


def run_demo(pairs: list[Pair], args: argparse.Namespace, work: Path) -> list[PairResult]:
    """Start every server (target-only ones together, vSpec ones one at a time, so each vSpec
    start-up calibration runs while the others sit idle), measure pair by pair, stop all."""
    made = [make_servers(p, args, work) for p in pairs]
    order = [s["baseline"] for s in made] + [s["vspec"] for s in made]
    results = []
    try:
        for group in ([s["baseline"] for s in made], *([s["vspec"]] for s in made)):
            for server in group:
                print(f"demo: starting the {server.name} server ...", flush=True)
                server.start(os.environ)
            for server in group:
                try:
                    server.wait_ready(args.server_timeout)
                except ServerStartError as exc:
                    raise SystemExit(f"demo: {exc}") from None
                print(f"demo: {server.name} ready after {server.ready_after_s:.0f} s",
                      flush=True)
        for pair, servers in zip(pairs, made, strict=True):
            res = PairResult(pair, ready_s={a: servers[a].ready_after_s for a in ARMS})
            run_rounds(res, servers, args, work)
            results.append(res)
    finally:
        for server in order:
            server.interrupt()
        for server in order:
            server.stop()
    return results


def plot(results: list[PairResult], path: Path) -> str | None:
    """Per pair: tokens/s per round (top), share of vSpec steps at each gamma (bottom)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install vllm-hust-vspec[bench])"
    fig, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 8), squeeze=False)
    colors = plt.get_cmap("viridis")
    for col, res in enumerate(results):
        ax = axes[0][col]
        for arm, color in (("baseline", "tab:gray"), ("vspec", "tab:blue")):
            ax.plot([r["round"] for r in res.runs[arm]], res.tps(arm), marker="o", color=color,
                    label=f"{LABEL[arm]} (median {res.median(arm):.0f})")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("measured round")
        ax.set_ylabel("output tokens/s")
        ax.set_title(f"{res.pair.title}\nvSpec / target-only {res.ratio():.2f}x "
                     "(ratio of the medians)", fontsize="medium")
        ax.legend(fontsize="small", loc="lower right")
        ax = axes[1][col]
        runs = [res.warmup.get("vspec", {}), *res.runs["vspec"]]
        per_round = [res.gamma_steps([r]) for r in runs]
        top = max([4, *(g for steps in per_round for g in steps)])
        bottom = [0.0] * len(runs)
        for g in range(top + 1):
            shares = [steps.get(g, 0.0) / (sum(steps.values()) or 1.0) for steps in per_round]
            ax.bar(range(len(runs)), shares, bottom=bottom, color=colors(g / top),
                   label=f"gamma {g}")
            bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels(["warm-up", *(str(r["round"]) for r in res.runs["vspec"])],
                           fontsize="small")
        ax.set_ylim(0, 1)
        ax.set_xlabel("round")
        ax.set_ylabel("share of vSpec steps")
        ax.set_title("gamma the controller played", fontsize="medium")
        ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.2),
                  ncol=top + 1, frameon=False)
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
        ok = res.ratio() >= res.pair.expected
        rows.append((
            res.pair.title, f"{res.median('baseline'):.0f}", f"{res.median('vspec'):.0f}",
            f"{res.ratio():.2f}x", "?" if g is None else f"{g} ({share:.0%} of steps)",
            f">= {res.pair.expected:.1f}x {'ok' if ok else 'MISSED'}",
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
    parser.add_argument("--rounds", type=int, default=8, help="measured rounds per pair")
    parser.add_argument("--num-prompts", type=int, default=32, help="requests per run")
    parser.add_argument("--output-len", type=int, default=128, help="tokens per request")
    parser.add_argument("--input-len", type=int, default=128, help="words per random prompt")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--seed", type=int, default=0, help="prompt seed")
    parser.add_argument("--warmup-prompts", type=int, default=8,
                        help="short unmeasured requests before every measured run")
    parser.add_argument("--omp-threads", type=int, default=0,
                        help="OMP_NUM_THREADS of both arms' servers (0: the preset's, 1 for "
                             "cpu-tiny)")
    parser.add_argument("--pairs", default="pays,no-pay",
                        help=f"which pairs, in order (of: {', '.join(p.key for p in PAIRS)})")
    parser.add_argument("--out", default=str(ROOT / ".cache" / "demo"))
    parser.add_argument("--server-timeout", type=float, default=300.0)
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a pair's ratio is below what it is expected to reach")
    parser.add_argument("extra", nargs="*",
                        help="after --: more vllm-hust-vspec-bench pair flags for both pairs")
    args = parser.parse_args()
    by_key = {p.key: p for p in PAIRS}
    try:
        pairs = [by_key[k] for k in args.pairs.split(",") if k]
    except KeyError as exc:
        parser.error(f"--pairs: unknown pair {exc}")
    work = Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HUST_VSPEC_MODEL_DIR", str(ROOT / ".cache" / "models"))
    print(f"demo: each run {args.num_prompts} requests x {args.output_len} tokens, "
          f"{args.concurrency} in flight, the same prompts for both arms; per pair 1 warm-up + "
          f"{args.rounds} measured rounds, arms alternating first", flush=True)
    busy = cpu_busy()
    if busy is not None and busy > 0.25:
        print(f"demo: note: other processes keep {busy:.0%} of the {os.cpu_count()} CPUs busy; "
              "they compete with the servers, so the figures will be noisy", flush=True)
    t0 = time.monotonic()
    results = run_demo(pairs, args, work)
    (work / "summary.json").write_text(json.dumps([r.to_dict() for r in results], indent=1)
                                       + "\n")
    fig = work / "side-by-side.png"
    why_not = plot(results, fig)
    print(f"\ndemo: {time.monotonic() - t0:.0f} s; tok/s: median over the measured rounds; "
          "vSpec/target: their ratio\n")
    print(table(results))
    print(f"\nplot: {fig}" if why_not is None else f"\nplot: not written ({why_not})")
    print(f"per-round results, server logs, summary.json: {work}")
    missed = [r for r in results if r.ratio() < r.pair.expected]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
