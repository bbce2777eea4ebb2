"""The one patch utility of vSpec.

Every attribute vSpec replaces on a host class goes through a :class:`Patcher`: it records the
original beside the replacement, refuses to patch an attribute that is already patched (by any
patcher in the process), undoes in reverse order, and fails closed with an error that names
the missing module, class or attribute when the host lacks it.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_MISSING = object()


class PatchError(RuntimeError):
    """A patch cannot be applied (missing target, double patch) or undone."""


@dataclass(frozen=True)
class PatchRecord:
    """One applied patch: enough to restore the owner exactly."""

    owner: Any
    name: str
    # The raw value found in ``owner.__dict__`` (keeps staticmethod/classmethod wrappers),
    # or ``None`` with ``inherited=True`` when the attribute came from a base class.
    original: Any
    inherited: bool
    replacement: Any

    @property
    def label(self) -> str:
        """``module.Class.attr`` for messages."""
        return f"{describe(self.owner)}.{self.name}"


# (id(owner), name) -> record, across every Patcher: the same attribute is never patched twice.
_ACTIVE: dict[tuple[int, str], PatchRecord] = {}
_LOCK = threading.RLock()


def describe(owner: Any) -> str:
    """A readable dotted name for a class or module."""
    module = getattr(owner, "__module__", None)
    qualname = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", None)
    if isinstance(owner, type) and module and qualname:
        return f"{module}.{qualname}"
    return str(getattr(owner, "__name__", owner))


def resolve(module: str, qualname: str) -> Any:
    """Import ``module`` and return ``qualname`` inside it (dots allowed).

    Raises :class:`PatchError` naming exactly what is missing.
    """
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise PatchError(
            f"vSpec needs module '{module}' from the host, but importing it failed: {exc}"
        ) from exc
    path = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise PatchError(
                f"vSpec needs '{path}.{part}' but the host has no such attribute "
                f"(host version not supported; run the doctor)."
            )
        obj = getattr(obj, part)
        path = f"{path}.{part}"
    return obj


def resolve_any(modules: tuple[str, ...], qualname: str) -> Any:
    """:func:`resolve` in the first of ``modules`` that has ``qualname`` (a class that moved
    between host versions). Raises :class:`PatchError` naming every place looked in."""
    errors = []
    for module in modules:
        try:
            return resolve(module, qualname)
        except PatchError as exc:
            errors.append(str(exc))
    raise PatchError(" | ".join(errors))


def is_patched(owner: Any, name: str) -> bool:
    """True when ``owner.name`` is currently patched by any :class:`Patcher`."""
    with _LOCK:
        return (id(owner), name) in _ACTIVE


def original_of(owner: Any, name: str) -> Any:
    """The value ``owner.name`` resolved to before it was patched."""
    with _LOCK:
        record = _ACTIVE.get((id(owner), name))
    if record is None:
        raise PatchError(f"{describe(owner)}.{name} is not patched")
    if record.inherited:
        for base in owner.__mro__[1:]:
            if name in vars(base):
                return vars(base)[name]
        raise PatchError(f"inherited original of {describe(owner)}.{name} vanished")
    return record.original


def _raw(owner: Any, name: str) -> Any:
    # The stored value, not the descriptor result (staticmethod objects compare as stored).
    if hasattr(owner, "__dict__") and name in vars(owner):
        return vars(owner)[name]
    return getattr(owner, name, _MISSING)


class Patcher:
    """Applies and undoes a named group of patches.

    >>> p = Patcher("demo")
    >>> p.wrap(SomeClass, "method", lambda orig: lambda self, *a: orig(self, *a))  # doctest: +SKIP
    >>> p.undo()  # doctest: +SKIP
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self._records: list[PatchRecord] = []

    @property
    def records(self) -> tuple[PatchRecord, ...]:
        """Applied patches, oldest first."""
        return tuple(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def patch(self, owner: Any, name: str, replacement: Any, *, create: bool = False) -> Any:
        """Set ``owner.name = replacement``; return the value it resolved to before.

        ``create=True`` allows adding an attribute the owner does not have yet; otherwise a
        missing attribute is an error (the host lacks what vSpec was written against).
        """
        key = (id(owner), name)
        with _LOCK:
            if key in _ACTIVE:
                raise PatchError(
                    f"{describe(owner)}.{name} is already patched (by '{self.label}' or "
                    f"another vSpec patch group); refusing to patch it twice"
                )
            current = getattr(owner, name, _MISSING)
            if current is _MISSING and not create:
                raise PatchError(
                    f"vSpec cannot patch {describe(owner)}.{name}: the host has no such "
                    f"attribute (host version not supported; run the doctor)"
                )
            own = vars(owner).get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
            inherited = own is _MISSING
            record = PatchRecord(
                owner=owner,
                name=name,
                original=None if inherited else own,
                inherited=inherited,
                replacement=replacement,
            )
            setattr(owner, name, replacement)
            _ACTIVE[key] = record
            self._records.append(record)
        return None if current is _MISSING else current

    def wrap(
        self,
        owner: Any,
        name: str,
        make: Callable[[Callable[..., Any]], Callable[..., Any]],
    ) -> Callable[..., Any]:
        """Replace the function ``owner.name`` with ``make(original)``.

        The wrapper keeps the original's name/docstring (``functools.wraps``) and carries
        ``__vspec_original__`` so tooling can see what it wraps.
        """
        original = getattr(owner, name, _MISSING)
        if original is _MISSING:
            raise PatchError(
                f"vSpec cannot wrap {describe(owner)}.{name}: the host has no such attribute "
                f"(host version not supported; run the doctor)"
            )
        if not callable(original):
            raise PatchError(f"vSpec cannot wrap {describe(owner)}.{name}: it is not callable")
        wrapper = make(original)
        functools.update_wrapper(wrapper, original)
        wrapper.__vspec_original__ = original  # type: ignore[attr-defined]
        self.patch(owner, name, wrapper)
        return wrapper

    def undo(self) -> None:
        """Restore every attribute this patcher changed, newest first."""
        with _LOCK:
            errors: list[str] = []
            while self._records:
                record = self._records.pop()
                key = (id(record.owner), record.name)
                try:
                    if _raw(record.owner, record.name) is not record.replacement:
                        errors.append(f"{record.label} was changed by someone else; restored")
                    if record.inherited:
                        if record.name in vars(record.owner):
                            delattr(record.owner, record.name)
                    else:
                        setattr(record.owner, record.name, record.original)
                finally:
                    _ACTIVE.pop(key, None)
            if errors:
                raise PatchError("; ".join(errors))


__all__ = [
    "PatchError",
    "PatchRecord",
    "Patcher",
    "describe",
    "is_patched",
    "original_of",
    "resolve",
    "resolve_any",
]
