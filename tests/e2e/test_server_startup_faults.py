"""A real cpu-tiny `vllm serve` whose engine fails at start-up ends the launch.

The test-only fault hook (``VSPEC_TEST_STARTUP_FAULT``, host/startup_faults.py) fails real
start-up
work of the EngineCore in three places: the vspec_ metrics (scheduler built, before the READY
handshake), the start-up calibration (after READY, on its first real step) and the trace file
(after READY, once the calibration is done). Each launch must exit non-zero with one line on
stderr naming the fault, within 10 s of that line (before the fix a fault after READY left the
API server waiting forever for a utility call the dead engine would never answer).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

from vllm_hust_vspec.host.startup_faults import PREFIX, TEST_FAULT_ENV  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.server]

START_TIMEOUT_S = 300  # model load and start-up profile on a loaded 2-core machine
EXIT_AFTER_FAULT_S = 10.0  # exit within 10 s of the fault

# fault place -> (the stage the line names, what it says of the fault)
FAULTS = {
    "metrics": ("vspec_ metrics", "PROMETHEUS_MULTIPROC_DIR="),
    "calibration": ("start-up calibration", f"{TEST_FAULT_ENV}=calibration"),
    "trace": ("adaptive trace", "vSpec adaptive_trace: cannot open"),
}


@dataclass
class Lines:
    """Lines of one stream with their arrival times (monotonic)."""

    items: list[tuple[float, str]] = field(default_factory=list)

    def read(self, stream: object) -> None:
        for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
            self.items.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))

    def text(self) -> str:
        return "\n".join(line for _, line in self.items)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("place", list(FAULTS))
def test_engine_fault_at_start_up_ends_the_launch(place: str, tmp_path: Path) -> None:
    es.model("target"), es.model("draft")  # skips when the tiny models are not built
    stage, detail = FAULTS[place]
    (tmp_path / "prom").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUST_VSPEC_")}
    env.update({"HUST_VSPEC_MODEL_DIR": str(es.models_dir()), TEST_FAULT_ENV: place,
                "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom")})
    cmd = [sys.executable, "-m", "vllm_hust_vspec.cli.launch", "--protocol", "cpu-tiny",
           "--port", str(free_port()), "--adaptive-trace", str(tmp_path / "trace.jsonl")]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    out, err = Lines(), Lines()
    readers = [threading.Thread(target=lines.read, args=(stream,), daemon=True)
               for lines, stream in ((out, proc.stdout), (err, proc.stderr))]
    for reader in readers:
        reader.start()
    try:
        code = proc.wait(timeout=START_TIMEOUT_S)
        exited = time.monotonic()
    except subprocess.TimeoutExpired:
        code, exited = None, time.monotonic()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for reader in readers:
            reader.join(timeout=10)
    log = (err.text() + "\n" + out.text())[-6000:]
    faults = [(t, line) for t, line in err.items if line.startswith(PREFIX)]
    assert code is not None, f"still running {START_TIMEOUT_S} s after start:\n{log}"
    assert code != 0, log
    assert len(faults) == 1, log  # one line names the fault
    fault_at, line = faults[0]
    assert f"({stage}, pid " in line and detail in line, line
    took = exited - fault_at
    print(f"{place}: started {fault_at - t0:.1f} s, exit {code} {took:.2f} s after the fault")
    assert took <= EXIT_AFTER_FAULT_S, f"exit {took:.1f} s after the fault:\n{log}"
    assert group_gone(proc.pid, 10.0), "engine or worker processes left running"


def group_gone(pgid: int, within_s: float) -> bool:
    """True once no process of the launch's session is left (waited for up to
    ``within_s``)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            os.killpg(pgid, signal.SIGKILL)
            return False
        time.sleep(0.2)
