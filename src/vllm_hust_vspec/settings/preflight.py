"""Checks on the files settings name, made before any model loads.

The launcher runs them before it execs ``vllm serve`` and the plugin runs them when it
registers (env-only enabling), so a missing profile or an unwritable trace path fails in a
second with the flag, key or variable the user wrote, not minutes later after the model loaded.
Nothing here modifies a file: a path to be written is tried the way its writer will create it
(missing folders, then a file opened for appending), in a probe that is removed again.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

from vllm_hust_vspec.settings.coerce import SettingsError
from vllm_hust_vspec.settings.fields import OPTIONS_BY_NAME, Settings


def origin(origins: Mapping[str, str], name: str) -> str:
    """How the user spelled option ``name`` (flag, file and key, or variable)."""
    return origins.get(name) or f"option {name} ({OPTIONS_BY_NAME[name].flag})"


def preflight(s: Settings, origins: Mapping[str, str]) -> None:
    """Validate every file an option names; raises :class:`SettingsError` at the first fault."""
    if s.adaptive_profile:
        _check_profile(s.adaptive_profile, origin(origins, "adaptive_profile"))
    if s.adaptive_trace and s.adaptive_trace != "log":  # "log": the server log, no file
        check_writable_file(s.adaptive_trace, origin(origins, "adaptive_trace"))
    if s.adaptive_state_path:
        _check_state(s.adaptive_state_path, origin(origins, "adaptive_state_path"))
    if s.eagle_draft_active_vocab_file:
        _check_readable(s.eagle_draft_active_vocab_file,
                        origin(origins, "eagle_draft_active_vocab_file"))


def _check_profile(path: str, where: str) -> None:
    from vllm_hust_vspec.adaptive.profile import ProfileError
    from vllm_hust_vspec.adaptive.profile_file import load_profile

    try:
        load_profile(path)
    except ProfileError as exc:
        raise SettingsError(
            f"{where}: {exc} (collect one with vllm-hust-vspec-profile, or fit one with"
            " vllm-hust-vspec-fit-profile)"
        ) from None


def _check_state(path: str, where: str) -> None:
    from vllm_hust_vspec.adaptive.cost_state_file import CostStateError, read_state

    check_writable_file(path, where)
    try:
        read_state(path)  # an existing file must be a valid state
    except CostStateError as exc:
        raise SettingsError(f"{where}: {exc}") from None


def _check_readable(path: str, where: str) -> None:
    p = Path(os.path.expanduser(path))
    if not p.is_file():
        raise SettingsError(f"{where}: {path!r} is not a file")
    if not os.access(p, os.R_OK):
        raise SettingsError(f"{where}: {path!r} is not readable")


def check_writable_file(path: str, where: str) -> None:
    """``path`` can be opened for appending, as the trace and state writers open it.

    An existing file is opened for appending (nothing written) and closed. Otherwise the
    missing folders are made and a probe file beside ``path`` is created and opened for
    appending, as the writer will (``mkdir(parents=True)``, then ``open("a")``); the probe and
    every folder made for it are removed again. Permission bits do not bind root, and some
    file systems (``/proc``, read-only mounts) refuse what looks writable: only trying says.
    """
    p = Path(os.path.expanduser(path))
    if p.is_dir():
        raise SettingsError(f"{where}: {path!r} is a folder; name a file inside it")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise SettingsError(f"{where}: {path!r} is not writable")
        try:  # O_NONBLOCK: a FIFO without a reader fails instead of blocking
            os.close(os.open(p, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        except OSError as exc:
            raise SettingsError(f"{where}: cannot open {path!r} for appending: "
                                f"{_reason(exc)}") from None
        return
    parent = p.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise SettingsError(f"{where}: cannot create {path!r}: {str(parent)!r} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SettingsError(
            f"{where}: cannot create {path!r}: folder {str(parent)!r} is not writable"
        )
    for attempt in range(3):
        try:
            _probe(p.absolute())
            return
        except OSError as exc:
            # ENOENT may be a folder another process's probe made and removed meanwhile
            if not isinstance(exc, FileNotFoundError) or attempt == 2:
                raise SettingsError(f"{where}: cannot create {path!r}: {_reason(exc)}"
                                    ) from None


def _probe(p: Path) -> None:
    """Make ``p``'s missing folders and a file beside ``p`` opened for appending, then remove
    all of them (a folder only while empty: another process may be writing there now)."""
    missing: list[Path] = []
    folder = p.parent
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    made: list[Path] = []
    try:
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:  # another process made it meanwhile: not ours
                continue
            made.append(d)
        probe = p.parent / f".{p.name}.vspec-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:  # named as the file the writer will open
            raise type(exc)(exc.errno, exc.strerror, str(p)) from None
        os.unlink(probe)
    finally:
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()


def _reason(exc: OSError) -> str:
    """``strerror: 'filename'`` of an OSError (its text when it has none)."""
    if exc.strerror and exc.filename:
        return f"{exc.strerror}: {str(exc.filename)!r}"
    return exc.strerror or str(exc)


__all__ = ["check_writable_file", "origin", "preflight"]
