"""Reading input files as UTF-8 text and replacing output files atomically.

Shared by every layer (this is the bottom one): the fit-profile and profile commands write
with :func:`write_text_atomic`; samples, profile, scenario and trace readers read with
:func:`read_utf8_text` so a binary file is a one-line error naming the file, not a traceback.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path


def read_utf8_text(path: Path, what: str, error: Callable[[str], Exception]) -> str:
    """The text of ``path``; unreadable or non-UTF-8 files raise ``error(message)``.

    ``what`` names the file's role in the message ("samples", "trace", ...). JSON is UTF-8 by
    definition (RFC 8259), so a file that does not decode cannot be JSON either.
    """
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise error(f"{path}: cannot read {what}: not UTF-8 text (byte 0x{byte:02x} at offset "
                    f"{exc.start}), so not JSON") from None


def read_json_file(path: Path, what: str, error: Callable[[str], Exception]) -> object:
    """The parsed JSON of ``path``; unreadable, non-UTF-8 or malformed files raise
    ``error(message)`` naming the file and, for malformed JSON, the line and column."""
    text = read_utf8_text(path, what, error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}): "
                    f"{exc.msg}") from None


def write_text_atomic(path: Path, text: str, *, make_parents: bool = False) -> None:
    """Replace ``path`` with ``text`` (UTF-8): readers see the old file or the new one.

    The text goes to a temporary file in the same directory, is fsynced, then renamed over
    ``path``. The temporary file is created with mode 0o666 minus the umask, as ``open()``
    creates a file: ``tempfile.mkstemp`` would make it 0600, unreadable to everyone else.
    """
    directory = path.parent
    if make_parents:
        directory.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for attempt in range(100):
        tmp = directory / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:  # a leftover or a concurrent writer: draw another name
            if attempt == 99:
                raise
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


__all__ = ["read_json_file", "read_utf8_text", "write_text_atomic"]
