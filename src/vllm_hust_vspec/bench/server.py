"""Starting and stopping the servers of a pair run, from the launcher's own command.

Both arms come from one :class:`~vllm_hust_vspec.launch.command.ServeCommand` (built by
``build_serve_command`` from the preset): the vSpec arm is that command; the baseline is the
same command without ``--speculative-config`` and with the plugin gate off. So every other
flag (dtype, lengths, batch limits, graph mode, ``[env]`` of the preset) is identical.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from vllm_hust_vspec import ENABLE_ENV
from vllm_hust_vspec.launch.command import ServeCommand

SPEC_FLAG = "--speculative-config"
PROM_ENV = "PROMETHEUS_MULTIPROC_DIR"
TRACE_ENV = "HUST_VSPEC_ADAPTIVE_TRACE"


_BUSY_PORT = "Address already in use"
_PORT_MOVES = 3


class ServerStartError(RuntimeError):
    """A server did not come up; the message points at its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _drop_flag(argv: list[str], flag: str) -> list[str]:
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return out


def with_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag``'s value replaced in place (appended when absent)."""
    out = list(argv)
    for i, a in enumerate(out):
        if a == flag and i + 1 < len(out):
            out[i + 1] = value
            return out
        if a.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return out
    return [*out, flag, value]


def baseline_command(vspec: ServeCommand) -> ServeCommand:
    """The target-only twin of a vSpec command: no speculation, plugin gate off."""
    if _flag_value(vspec.argv, SPEC_FLAG) is None:
        raise ValueError(f"the vSpec command has no {SPEC_FLAG}; nothing to compare against")
    env = {k: v for k, v in vspec.env.items() if not k.startswith("HUST_VSPEC_")}
    env[ENABLE_ENV] = "0"
    return ServeCommand(argv=_drop_flag(vspec.argv, SPEC_FLAG), env=env,
                        notes=["baseline: target-only (no speculative decoding)"])


def base_url_of(cmd: ServeCommand) -> str:
    """``http://host:port`` the command's server will answer on."""
    host = _flag_value(cmd.argv, "--host") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    port = _flag_value(cmd.argv, "--port") or "8000"
    return f"http://{host}:{port}"


@dataclass
class ServerProcess:
    """One running server started by the benchmark (its own process group)."""

    name: str
    command: ServeCommand
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    started_s: float = 0.0
    ready_after_s: float = 0.0
    #: Pick a free port at each start (not when the command was built: servers started
    #: minutes later find it taken by another engine's sockets) and move to a new one when
    #: the bind still loses the race. Off: the command's port is kept, busy or not.
    any_port: bool = False
    _parent_env: Mapping[str, str] | None = None
    _port_moves: int = 0

    @property
    def base_url(self) -> str:
        return base_url_of(self.command)

    def start(self, parent_env: Mapping[str, str]) -> None:
        """Spawn the server with the command's environment over ``parent_env``."""
        self._parent_env = parent_env
        if self.any_port:
            self.command = for_run(self.command, free_port(), {})
        env = {**parent_env, **self.command.env}
        if PROM_ENV in env:
            Path(env[PROM_ENV]).mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.command.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                # Own process group, so stop() reaches EngineCore too, but this session: a
                # new session would be its own kernel scheduling group (autogroup) and share
                # the CPUs half and half with the load client whatever either needs.
                process_group=0,
            )
        self.started_s = time.monotonic()

    def wait_ready(self, timeout_s: float, tick: Callable[[float], None] | None = None) -> None:
        """Poll ``/health`` until 200; fail early (with the log's tail) if the server dies."""
        assert self.proc is not None, "start() first"
        deadline = self.started_s + timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None and self._moved_off_a_taken_port():
                continue
            if code is not None:
                raise ServerStartError(
                    f"{self.name} server exited with {code} before it was ready; last log "
                    f"lines of {self.log_path}:\n{tail(self.log_path)}"
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        self.ready_after_s = time.monotonic() - self.started_s
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if tick is not None:
                tick(time.monotonic() - self.started_s)
            time.sleep(1.0)
        self.stop()
        raise ServerStartError(
            f"{self.name} server was not ready after {timeout_s:.0f} s (raise "
            f"--server-timeout); last log lines of {self.log_path}:\n{tail(self.log_path)}"
        )

    def _moved_off_a_taken_port(self) -> bool:
        """Restart on a new free port when the exit was a lost bind race (``any_port``)."""
        if (not self.any_port or self._port_moves >= _PORT_MOVES
                or _BUSY_PORT not in tail(self.log_path)):
            return False
        self._port_moves += 1
        assert self._parent_env is not None
        self.stop()
        self.start(self._parent_env)
        return True

    def interrupt(self) -> None:
        """SIGINT the process group without waiting (so several servers shut down at once;
        :meth:`stop` then waits for each)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGINT the process group, then SIGKILL after ``grace_s``. Idempotent."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # EngineCore children may outlive the API server by a moment; reap the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file (for error messages)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def for_run(cmd: ServeCommand, port: int | None, env: Mapping[str, str]) -> ServeCommand:
    """``cmd`` moved to ``port`` (kept when None) with extra environment (per-start metrics
    dir, trace)."""
    argv = cmd.argv if port is None else with_flag(cmd.argv, "--port", str(port))
    return replace(cmd, argv=argv, env={**cmd.env, **env})


__all__ = [
    "ServerProcess",
    "ServerStartError",
    "base_url_of",
    "baseline_command",
    "for_run",
    "free_port",
    "with_flag",
]
