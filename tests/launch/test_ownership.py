"""A launch never touches a live server's metrics folder and refuses a port in use."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vllm_hust_vspec.launch.ownership import (
    LOCK_NAME,
    LaunchConflictError,
    check_port_free,
    claim_metrics_dir,
)

HOLDER = textwrap.dedent("""
    import os, sys, time
    from vllm_hust_vspec.launch.ownership import claim_metrics_dir
    fd = claim_metrics_dir(sys.argv[1], clear_stale=True)
    # exec keeps the inherited lock: the child now holds it, as vllm serve does
    os.execv(sys.executable, [sys.executable, "-c",
             "import sys, time; print('ready', flush=True); time.sleep(60)"])
""")


def test_stale_samples_are_cleared_when_nobody_holds_the_folder(tmp_path: Path) -> None:
    (tmp_path / "counter_1.db").write_text("old")
    fd = claim_metrics_dir(str(tmp_path), clear_stale=True)
    try:
        assert not list(tmp_path.glob("*.db"))
        assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())
        assert os.get_inheritable(fd)
    finally:
        os.close(fd)


def test_a_folder_the_user_named_is_never_emptied(tmp_path: Path) -> None:
    (tmp_path / "counter_1.db").write_text("theirs")
    fd = claim_metrics_dir(str(tmp_path), clear_stale=False)
    os.close(fd)
    assert (tmp_path / "counter_1.db").read_text() == "theirs"


def test_a_live_owner_keeps_its_samples(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        (tmp_path / "counter_live.db").write_text("live")
        with pytest.raises(LaunchConflictError, match=rf"pid {holder.pid}.*left untouched"):
            claim_metrics_dir(str(tmp_path), clear_stale=True)
        assert (tmp_path / "counter_live.db").read_text() == "live"
    finally:
        holder.kill()
        holder.wait()
    # the owner is gone: the folder is stale now and may be reclaimed
    os.close(claim_metrics_dir(str(tmp_path), clear_stale=True))
    assert not (tmp_path / "counter_live.db").exists()


def test_port_in_use_is_named() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(LaunchConflictError, match=f"port {port}.*in use"):
            check_port_free("127.0.0.1", port)
    check_port_free("127.0.0.1", port)  # free again
