"""Per-server state the launcher prepares: the listening port and the Prometheus folder.

The metrics folder is claimed with an advisory lock that the server process inherits across
``exec`` and holds for its whole life, so a second launch on the same port can tell that the
folder is live and leave it alone; only a folder nobody holds is emptied of stale samples.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from pathlib import Path

LOCK_NAME = ".vspec-owner.lock"


class LaunchConflictError(RuntimeError):
    """Another live server owns the port or the metrics folder this launch would use."""


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`LaunchConflictError` when ``host:port`` cannot be bound right now.

    Binds with ``SO_REUSEADDR`` as the server itself does, so a port in TIME_WAIT passes.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise LaunchConflictError(
                    f"port {port} on {host} is already in use (another server is listening);"
                    " stop it or pick another --port"
                ) from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise LaunchConflictError(
                    f"--host {host}: no local interface has that address"
                ) from None
            raise


def claim_metrics_dir(path: str, *, clear_stale: bool) -> int:
    """Create the Prometheus multiprocess folder and take its owner lock.

    Returns the lock's file descriptor, inheritable, to be kept open across ``exec``. With
    ``clear_stale`` (the folder is the launcher's own per-port default) leftover ``*.db``
    samples of a server that is gone are removed. Raises :class:`LaunchConflictError`, leaving
    every file untouched, when a live process holds the lock.
    """
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    lock_path = folder / LOCK_NAME
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = _read_owner(fd)
        os.close(fd)
        raise LaunchConflictError(
            f"the metrics folder {path} (PROMETHEUS_MULTIPROC_DIR) belongs to a running server"
            f"{f' (pid {owner})' if owner else ''}; it was left untouched. Stop that server,"
            " or give this one another --port or PROMETHEUS_MULTIPROC_DIR"
        ) from None
    if clear_stale:
        for child in folder.glob("*.db"):
            with contextlib.suppress(FileNotFoundError):
                child.unlink()
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    os.set_inheritable(fd, True)
    return fd


def _read_owner(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""


__all__ = ["LOCK_NAME", "LaunchConflictError", "check_port_free", "claim_metrics_dir"]
