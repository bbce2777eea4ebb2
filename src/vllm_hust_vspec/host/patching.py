"""The one patch utility of vSpec.

Every attribute vSpec replaces on a host class goes through a :class:`Patcher`. vSpec's own
records (kept here, never markers read off functions) say which layer of a target is vSpec's:

* :meth:`Patcher.wrap` wraps whatever is installed at the time, another plugin's wrapper
  included, and refuses to wrap a target where vSpec already has a layer (by any patcher in
  the process), so the load order of plugins does not matter;
* :meth:`Patcher.undo` removes only vSpec's layer: where another plugin wrapped on top of
  it, vSpec's layer stays in the chain as a pass-through instead of cutting the other out
  (a later wrap of the same target re-arms that layer rather than adding a second one);
* a missing host module, class or attribute fails closed with an error naming it.

:func:`layers` walks a target's chain top-down (vSpec's layers, other plugins' wrappers, the
host's function) for the ABI probes and the doctor.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_MISSING = object()
logger = logging.getLogger("vllm_hust_vspec.host")

# Top-level packages whose functions are the host's own (not another plugin's wrapper).
HOST_PACKAGES = ("vllm", "vllm_ascend")
# Libraries whose decorators and generated methods sit on host classes: not plugins' layers
# (the standard library counts too).
LIBRARY_PACKAGES = frozenset({"torch", "typing_extensions", "numba", "pydantic",
                              "pydantic_core", "triton", "transformers", "msgspec"})
VSPEC = "vllm-hust-vspec"


class PatchError(RuntimeError):
    """A patch cannot be applied (missing target, double patch) or undone."""


@dataclass(eq=False)
class _Layer:
    """The switch inside one vSpec wrapper: ``impl`` runs, ``below`` is what it wraps."""

    impl: Callable[..., Any]
    below: Callable[..., Any]

    def disarm(self) -> None:
        """Pass every call straight to what the layer wraps."""
        self.impl = self.below


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
    # For wraps: the switch that turns vSpec's layer into a pass-through.
    layer: _Layer | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        """``module.Class.attr`` for messages."""
        return f"{describe(self.owner)}.{self.name}"


# (id(owner), name) -> record, across every Patcher: vSpec never has two layers on a target.
_ACTIVE: dict[tuple[int, str], PatchRecord] = {}
# Layers undone while another plugin's wrapper sat on top: they pass through, and a later
# wrap of the same target re-arms them.
_RETIRED: dict[tuple[int, str], PatchRecord] = {}
# id(wrapper function) -> record, for every vSpec layer still in some chain.
_BY_FUNCTION: dict[int, PatchRecord] = {}
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
    """True when vSpec has an armed layer on ``owner.name`` (any :class:`Patcher`)."""
    with _LOCK:
        return (id(owner), name) in _ACTIVE


def original_of(owner: Any, name: str) -> Any:
    """The value ``owner.name`` resolved to before vSpec patched it (another plugin's
    wrapper when that plugin loaded first)."""
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


def active_records() -> tuple[PatchRecord, ...]:
    """Every armed vSpec patch in this process, oldest first."""
    with _LOCK:
        return tuple(_ACTIVE.values())


def _raw(owner: Any, name: str) -> Any:
    # The stored value, not the descriptor result (staticmethod objects compare as stored).
    if hasattr(owner, "__dict__") and name in vars(owner):
        return vars(owner)[name]
    return getattr(owner, name, _MISSING)


# ---- reading a target's chain -------------------------------------------------------------
@dataclass(frozen=True)
class Layer:
    """One function in a target's chain, top-down."""

    function: Any
    # "vllm-hust-vspec", the host package ("vllm", "vllm_ascend"), or the plugin that
    # defined the wrapper (its distribution name where known, else its top-level package).
    by: str
    host: bool = False
    # How the next layer down was found: "__wrapped__", "closure", or "" (the bottom, or a
    # wrapper whose inside cannot be seen).
    via: str = ""


def _function_of(value: Any) -> Any:
    return value.__func__ if isinstance(value, staticmethod | classmethod) else value


def _top_package(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or ""
    code = getattr(fn, "__code__", None)
    if code is not None:
        # functools.wraps copies __module__ from what a wrapper wraps; the code object tells
        # where the wrapper itself was written.
        found = _module_of_file(code.co_filename)
        if found:
            return found
    return module.partition(".")[0]


@functools.lru_cache(maxsize=512)
def _module_of_file(filename: str) -> str:
    best = ""
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if path and path == filename and (not best or len(name) < len(best)):
            best = name
    return best.partition(".")[0]


@functools.lru_cache(maxsize=128)
def _distribution_of(package: str) -> str:
    from importlib import metadata

    try:
        dists = metadata.packages_distributions().get(package)
    except Exception:  # noqa: BLE001 - broken metadata must not stop a report
        dists = None
    return dists[0] if dists else package


def owner_of(fn: Any) -> str:
    """Who wrote ``fn``: ``vllm-hust-vspec`` for vSpec's layers, the host package for the
    host's own functions, else the distribution (or top-level package) of the plugin."""
    with _LOCK:
        if id(fn) in _BY_FUNCTION:
            return VSPEC
    package = _top_package(fn)
    if package in HOST_PACKAGES:
        return package
    if package == "vllm_hust_vspec":
        return VSPEC
    return _distribution_of(package) if package else "unknown"


def _below(fn: Any, name: str) -> tuple[Any, str]:
    """The function ``fn`` wraps, and how it was found (``__wrapped__`` or a closure cell
    holding a function of the same name, or the only function in the closure)."""
    with _LOCK:
        record = _BY_FUNCTION.get(id(fn))
    if record is not None and record.layer is not None:
        return record.layer.below, "__wrapped__"
    inner = getattr(fn, "__wrapped__", None)
    if inner is not None:
        return inner, "__wrapped__"
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())
             if _cell_is_callable(c)]
    named = [f for f in cells if getattr(_function_of(f), "__name__", None) == name]
    if len(named) == 1:
        return named[0], "closure"
    functions = [f for f in cells if callable(f) and hasattr(_function_of(f), "__code__")]
    if len(functions) == 1:
        return functions[0], "closure"
    return None, ""


def _cell_is_callable(cell: Any) -> bool:
    try:
        return callable(cell.cell_contents)
    except ValueError:  # an empty cell
        return False


def chain(fn: Any, name: str, *, limit: int = 32) -> list[Layer]:
    """``fn`` and what it wraps, top-down, down to the host's function or to a wrapper whose
    inside cannot be seen (its ``via`` is empty and it is not the host's)."""
    out: list[Layer] = []
    seen: set[int] = set()
    current = _function_of(fn)
    while current is not None and id(current) not in seen and len(out) < limit:
        seen.add(id(current))
        by = owner_of(current)
        if by in HOST_PACKAGES:
            out.append(Layer(current, by, host=True))
            break
        below, via = _below(current, name)
        out.append(Layer(current, by, via=via if below is not None else ""))
        current = _function_of(below) if below is not None else None
    return out


def _plugin_layer(layer: Layer) -> bool:
    if layer.host or layer.by == VSPEC:
        return False
    package = _top_package(layer.function)
    return bool(package) and package not in LIBRARY_PACKAGES \
        and package not in sys.stdlib_module_names


def layers(owner: Any, name: str) -> list[Layer]:
    """The chain installed at ``owner.name`` now (see :func:`chain`)."""
    value = _raw(owner, name)
    if value is _MISSING:
        return []
    return chain(value, name)


def host_function(fn: Any, name: str) -> tuple[Any, list[Layer]]:
    """The host's own function under any wrappers on ``fn``, or ``None`` when a wrapper
    hides it; with the foreign layers (neither vSpec's nor the host's) passed on the way."""
    found = chain(fn, name)
    foreign = [layer for layer in found if _plugin_layer(layer)]
    bottom = found[-1] if found else None
    return (bottom.function if bottom is not None and bottom.host else None), foreign


# ---- patching -----------------------------------------------------------------------------
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

    def _refuse_twice(self, owner: Any, name: str) -> None:
        if (id(owner), name) in _ACTIVE:
            raise PatchError(
                f"{describe(owner)}.{name} is already patched (by '{self.label}' or "
                f"another vSpec patch group); refusing to patch it twice"
            )

    def _install(self, owner: Any, name: str, replacement: Any,
                 layer: _Layer | None) -> PatchRecord:
        own = vars(owner).get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        inherited = own is _MISSING
        record = PatchRecord(owner=owner, name=name, original=None if inherited else own,
                             inherited=inherited, replacement=replacement, layer=layer)
        setattr(owner, name, replacement)
        _ACTIVE[(id(owner), name)] = record
        if layer is not None:
            _BY_FUNCTION[id(replacement)] = record
        self._records.append(record)
        return record

    def patch(self, owner: Any, name: str, replacement: Any, *, create: bool = False) -> Any:
        """Set ``owner.name = replacement``; return the value it resolved to before.

        ``create=True`` allows adding an attribute the owner does not have yet; otherwise a
        missing attribute is an error (the host lacks what vSpec was written against).
        """
        with _LOCK:
            self._refuse_twice(owner, name)
            current = getattr(owner, name, _MISSING)
            if current is _MISSING and not create:
                raise PatchError(
                    f"vSpec cannot patch {describe(owner)}.{name}: the host has no such "
                    f"attribute (host version not supported; run the doctor)"
                )
            self._install(owner, name, replacement, None)
        return None if current is _MISSING else current

    def wrap(
        self,
        owner: Any,
        name: str,
        make: Callable[[Callable[..., Any]], Callable[..., Any]],
    ) -> Callable[..., Any]:
        """Put vSpec's layer ``make(current)`` on ``owner.name``, whatever is installed there
        now (the host's function or another plugin's wrapper).

        The installed function keeps the wrapped one's name and docstring, carries
        ``__wrapped__`` (so other tools can look through it) and ``__vspec_original__``
        (what it wraps), and copies none of the wrapped function's attributes: another
        plugin's "already installed" marker stays on that plugin's own wrapper.
        """
        key = (id(owner), name)
        with _LOCK:
            self._refuse_twice(owner, name)
            current = getattr(owner, name, _MISSING)
            if current is _MISSING:
                raise PatchError(
                    f"vSpec cannot wrap {describe(owner)}.{name}: the host has no such "
                    f"attribute (host version not supported; run the doctor)"
                )
            if not callable(current):
                raise PatchError(f"vSpec cannot wrap {describe(owner)}.{name}: it is not "
                                 "callable")
            retired = _RETIRED.get(key)
            if retired is not None and retired.layer is not None \
                    and _in_chain(current, name, retired.replacement):
                # vSpec's pass-through is still under another plugin's wrapper: re-arm it.
                del _RETIRED[key]
                retired.layer.impl = make(retired.layer.below)
                _ACTIVE[key] = retired
                self._records.append(retired)
                return retired.replacement
            if retired is not None:
                _forget(retired)
            layer = _Layer(impl=make(current), below=current)
            installed = _layer_function(layer, current)
            self._install(owner, name, installed, layer)
        return installed

    def undo(self) -> None:
        """Remove vSpec's layers, newest first. A layer with another plugin's wrapper on top
        stays in the chain as a pass-through (logged); everything else is restored exactly.
        A plain patch another plugin replaced is left as that plugin set it."""
        with _LOCK:
            while self._records:
                record = self._records.pop()
                key = (id(record.owner), record.name)
                if _ACTIVE.get(key) is not record:
                    continue
                del _ACTIVE[key]
                on_top = _raw(record.owner, record.name)
                if on_top is record.replacement:
                    _restore(record)
                elif record.layer is not None:
                    record.layer.disarm()
                    _RETIRED[key] = record
                    logger.info(
                        "vSpec: %s is wrapped by %s on top of vSpec's layer; vSpec's layer "
                        "stays as a pass-through so that wrapper keeps working",
                        record.label, owner_of(_function_of(on_top)))
                else:
                    logger.warning(
                        "vSpec: %s was replaced by %s after vSpec patched it; left as it is",
                        record.label, owner_of(_function_of(on_top)))


def settle_retired() -> int:
    """Take out vSpec's pass-through layers that nothing wraps any more (the plugin that
    wrapped on top of them removed its wrapper): restore what they wrapped. Returns how
    many were removed."""
    removed = 0
    with _LOCK:
        for record in list(_RETIRED.values()):
            if _raw(record.owner, record.name) is record.replacement:
                _restore(record)
                removed += 1
    return removed


def _restore(record: PatchRecord) -> None:
    """Put back what ``record`` replaced (vSpec's layer is on top) and forget it."""
    if record.inherited:
        if record.name in vars(record.owner):
            delattr(record.owner, record.name)
    else:
        setattr(record.owner, record.name, record.original)
    _forget(record)


def _layer_function(layer: _Layer, below: Any) -> Callable[..., Any]:
    def vspec_layer(*args: Any, **kwargs: Any) -> Any:
        return layer.impl(*args, **kwargs)

    # Name, docstring and signature of what it wraps; not its __dict__ (another plugin's
    # markers stay on that plugin's function).
    functools.update_wrapper(vspec_layer, below, updated=())
    # vSpec's own markers set by the wrapper factory travel with the installed function
    for key, value in getattr(layer.impl, "__dict__", {}).items():
        if key.startswith(("__vspec", "_vspec")):
            setattr(vspec_layer, key, value)
    vspec_layer.__vspec_original__ = below  # type: ignore[attr-defined]
    return vspec_layer


def _in_chain(top: Any, name: str, fn: Any) -> bool:
    return any(layer.function is fn for layer in chain(top, name))


def _forget(record: PatchRecord) -> None:
    _BY_FUNCTION.pop(id(record.replacement), None)
    _RETIRED.pop((id(record.owner), record.name), None)


__all__ = [
    "HOST_PACKAGES",
    "VSPEC",
    "Layer",
    "PatchError",
    "PatchRecord",
    "Patcher",
    "active_records",
    "chain",
    "describe",
    "host_function",
    "is_patched",
    "layers",
    "original_of",
    "owner_of",
    "resolve",
    "resolve_any",
    "settle_retired",
]
