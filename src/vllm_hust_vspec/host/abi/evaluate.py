"""Answer probes and checks against a resolver (either tier)."""

from __future__ import annotations

from vllm_hust_vspec.host.abi.info import ClassInfo, FuncInfo, Resolver, linearize
from vllm_hust_vspec.host.abi.model import (
    CALL_FITS,
    CALL_KW,
    CLASS,
    FIELD,
    FUNCTION,
    METHOD,
    MODULE,
    NOT_IN_SOURCE,
    SELF_ATTR,
    SOURCE,
    Check,
    CheckResult,
    Probe,
    ProbeResult,
)


def _missing_params(fn: FuncInfo, wanted: tuple[str, ...]) -> list[str]:
    return [p for p in wanted if p not in fn.params]


def _method(resolver: Resolver, cls: ClassInfo, name: str) -> tuple[ClassInfo, FuncInfo] | None:
    for owner in linearize(resolver, cls):
        if name in owner.methods:
            return owner, owner.methods[name]
    return None


def _not_in_source(resolver: Resolver, module: str | None) -> bool:
    # Only the static tier reads partial trees; the live tier imports whole packages.
    check = getattr(resolver, "not_in_source", None)
    return bool(module and check is not None and check(module))


def _unread_base(resolver: Resolver, cls: ClassInfo) -> str | None:
    """A base class (of ``cls`` or an ancestor) in a module a partial source lacks: a member
    not found may be inherited from it."""
    for owner in linearize(resolver, cls):
        for module, name in owner.bases:
            if _not_in_source(resolver, module) and resolver.get_class(module, name) is None:
                return f"{module}.{name}"
    return None


def _unread(p: Probe, resolver: Resolver, cls: ClassInfo, missing: str,
            note: str | None = None) -> ProbeResult:
    """A failed lookup on ``cls``; unknown rather than missing when an unread base could
    provide it."""
    base = _unread_base(resolver, cls)
    if base is None:
        return ProbeResult(p, False, missing=missing, note=note)
    return ProbeResult(p, False, missing=f"{missing} (base {base}: {NOT_IN_SOURCE})",
                       note=NOT_IN_SOURCE)


def _call_fits(resolver: Resolver, p: Probe, owner: ClassInfo, fn: FuncInfo,
               note: str | None) -> ProbeResult:
    """Every call of ``p.callee`` in ``fn`` fits the signature ``p.params`` names."""
    t_module, t_class, t_method = p.params[:3]
    if not resolver.has_module(t_module):
        unread = _not_in_source(resolver, t_module)
        return ProbeResult(p, False, missing=f"module {t_module}"
                           + (f" ({NOT_IN_SOURCE})" if unread else ""),
                           note=NOT_IN_SOURCE if unread else note)
    target_cls = resolver.get_class(t_module, t_class)
    if target_cls is None:
        return ProbeResult(p, False, missing=f"{t_module}.{t_class}", note=note)
    found = _method(resolver, target_cls, t_method)
    if found is None:
        return _unread(p, resolver, target_cls, f"{t_module}.{t_class}.{t_method}", note)
    t_owner, target = found
    problems: list[str] = []
    for callee, positional, keywords, starred in fn.call_shapes:
        if callee != p.callee:
            continue
        unknown = sorted(k for k in keywords if k not in target.params)
        if unknown and not target.var_keyword:
            problems.append(f"keyword {', '.join(unknown)}=, which it does not take")
        # A bound call (method or constructor) fills ``self`` itself.
        limit = None if target.num_positional is None else target.num_positional - 1
        if limit is not None and not starred and positional > limit:
            problems.append(f"{positional} positional arguments, where it takes {limit} "
                            f"({', '.join(target.params[1:limit + 1])})")
    if problems:
        return ProbeResult(
            p, False, note=note,
            missing=f"a fitting call: {owner.name}.{p.name} passes {t_owner.label}."
                    f"{t_method} {'; '.join(problems)}")
    return ProbeResult(p, True, note=note)


def probe(resolver: Resolver, p: Probe) -> ProbeResult:
    """Look for one thing; on failure name exactly what is missing."""
    if not resolver.has_module(p.module):
        if _not_in_source(resolver, p.module):
            return ProbeResult(p, False, missing=f"module {p.module} ({NOT_IN_SOURCE})",
                               note=NOT_IN_SOURCE)
        return ProbeResult(p, False, missing=f"module {p.module}")
    if p.kind == MODULE:
        return ProbeResult(p, True)
    if p.kind == FUNCTION or (p.kind == SOURCE and p.cls is None):
        assert p.name
        fn = resolver.get_function(p.module, p.name)
        if fn is None:
            return ProbeResult(p, False, missing=f"{p.module}.{p.name}")
        if p.kind == SOURCE:
            if p.params[0] in fn.names:
                return ProbeResult(p, True)
            return ProbeResult(p, False,
                               missing=f"{p.module}.{p.name}: no reference to {p.params[0]}")
        lacking = _missing_params(fn, p.params)
        if lacking:
            return ProbeResult(p, False, missing=f"{p.module}.{p.name}({', '.join(lacking)})")
        return ProbeResult(p, True)
    assert p.cls
    cls = resolver.get_class(p.module, p.cls)
    where = f"{p.module}.{p.cls}"
    if cls is None:
        return ProbeResult(p, False, missing=where)
    if p.kind == CLASS:
        have = {name for _, name in cls.bases}
        lacking = [b for b in p.bases if b not in have]
        if lacking:
            return ProbeResult(p, False, missing=f"{where} base class {', '.join(lacking)}",
                               note=f"bases: {', '.join(sorted(have)) or 'none'}")
        return ProbeResult(p, True)
    assert p.name
    if p.kind == FIELD:
        for owner in linearize(resolver, cls):
            if p.name in owner.fields:
                return ProbeResult(p, True)
        return _unread(p, resolver, cls, f"{where}.{p.name} (field)")
    if p.kind == SELF_ATTR:
        for owner in linearize(resolver, cls):
            if p.name in owner.fields or any(
                p.name in m.self_attrs for m in owner.methods.values()
            ):
                return ProbeResult(p, True, note=f"set in {owner.label}")
        return _unread(p, resolver, cls, f"{where}: no self.{p.name} assignment")
    found = _method(resolver, cls, p.name)
    if found is None:
        return _unread(p, resolver, cls, f"{where}.{p.name}")
    owner, fn = found
    note = None if owner.label == cls.label else f"inherited from {owner.label}"
    if p.kind == METHOD:
        lacking = _missing_params(fn, p.params)
        if lacking:
            return ProbeResult(
                p, False, note=note,
                missing=f"{owner.label}.{p.name}({', '.join(lacking)})",
            )
        if p.owner and owner.name != p.owner:
            return ProbeResult(
                p, False, note=note,
                missing=f"{where}.{p.name} resolves to {owner.label}.{p.name}, not "
                        f"{p.owner}.{p.name} (MRO order)",
            )
        return ProbeResult(p, True, note=note)
    if p.kind == CALL_KW:
        keyword = p.params[0]
        if any(c == p.callee and keyword in kws for c, kws in fn.calls):
            return ProbeResult(p, True, note=note)
        return ProbeResult(
            p, False, note=note,
            missing=f"{owner.label}.{p.name}: no call {p.callee}({keyword}=...)",
        )
    if p.kind == CALL_FITS:
        return _call_fits(resolver, p, owner, fn, note)
    if p.kind == SOURCE:
        token = p.params[0]
        if token in fn.names:
            return ProbeResult(p, True, note=note)
        return ProbeResult(p, False, note=note,
                           missing=f"{owner.label}.{p.name}: no reference to {token}")
    raise ValueError(f"unknown probe kind {p.kind!r}")


def _unread_modules(results: list[ProbeResult]) -> tuple[str, ...]:
    """What the partial source lacks, once each (the missing names without the suffix)."""
    suffix = f" ({NOT_IN_SOURCE})"
    return tuple(dict.fromkeys((r.missing or "").removesuffix(suffix) for r in results
                               if not r.found and r.note == NOT_IN_SOURCE))


def run_check(resolver: Resolver, check: Check) -> CheckResult:
    """Evaluate every alternative; the first whose probes are all found wins.

    On a partial source a check is unread (neither passed nor failed) when an alternative
    failed only on what the source does not hold and no alternative passes, or, for a
    check with variants, no earlier alternative passes: the whole package could decide it
    either way.
    """
    cond = check.applies_if
    if isinstance(cond, Probe):
        r = probe(resolver, cond)
        if not r.found:
            if r.note == NOT_IN_SOURCE:
                return CheckResult(check, False, None, (r,), unread=_unread_modules([r]))
            return CheckResult(check, True, f"not applicable: no {cond.label}", ())
    elif cond and not resolver.has_module(cond):
        if _not_in_source(resolver, cond):
            missing = ProbeResult(Probe(kind=MODULE, module=cond), False,
                                  missing=f"module {cond} ({NOT_IN_SOURCE})",
                                  note=NOT_IN_SOURCE)
            return CheckResult(check, False, None, (missing,), unread=(f"module {cond}",))
        return CheckResult(check, True, f"not applicable: no {cond}", ())
    results: list[ProbeResult] = []
    winner: int | None = None
    unread: list[str] = []
    for i, alternative in enumerate(check.alternatives):
        found = [probe(resolver, p) for p in alternative]
        results.extend(found)
        failed = [r for r in found if not r.found]
        if winner is None and not failed:
            winner = i
        elif winner is None and all(r.note == NOT_IN_SOURCE for r in failed):
            # This alternative might hold on the whole package: where the alternatives name
            # what the host does (variants: first match wins) nothing past it can be
            # decided; a plain requirement is still met by any later alternative.
            unread.extend(_unread_modules(failed))
            if check.variants:
                break
    variant = None
    if winner is not None and check.variants:
        variant = check.variants[winner]
    return CheckResult(check, winner is not None, variant, tuple(results),
                       unread=() if winner is not None else tuple(dict.fromkeys(unread)))


__all__ = ["probe", "run_check"]
