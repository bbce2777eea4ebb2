"""Answer probes and checks against a resolver (either tier)."""

from __future__ import annotations

from vllm_hust_vspec.host.abi.info import ClassInfo, FuncInfo, Resolver, linearize
from vllm_hust_vspec.host.abi.model import (
    CALL_KW,
    CLASS,
    FIELD,
    FUNCTION,
    METHOD,
    MODULE,
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


def probe(resolver: Resolver, p: Probe) -> ProbeResult:
    """Look for one thing; on failure name exactly what is missing."""
    if not resolver.has_module(p.module):
        return ProbeResult(p, False, missing=f"module {p.module}")
    if p.kind == MODULE:
        return ProbeResult(p, True)
    if p.kind == FUNCTION:
        assert p.name
        fn = resolver.get_function(p.module, p.name)
        if fn is None:
            return ProbeResult(p, False, missing=f"{p.module}.{p.name}")
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
        return ProbeResult(p, False, missing=f"{where}.{p.name} (field)")
    if p.kind == SELF_ATTR:
        for owner in linearize(resolver, cls):
            if p.name in owner.fields or any(
                p.name in m.self_attrs for m in owner.methods.values()
            ):
                return ProbeResult(p, True, note=f"set in {owner.label}")
        return ProbeResult(p, False, missing=f"{where}: no self.{p.name} assignment")
    found = _method(resolver, cls, p.name)
    if found is None:
        return ProbeResult(p, False, missing=f"{where}.{p.name}")
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
    if p.kind == SOURCE:
        token = p.params[0]
        if token in fn.names:
            return ProbeResult(p, True, note=note)
        return ProbeResult(p, False, note=note,
                           missing=f"{owner.label}.{p.name}: no reference to {token}")
    raise ValueError(f"unknown probe kind {p.kind!r}")


def run_check(resolver: Resolver, check: Check) -> CheckResult:
    """Evaluate every alternative; the first whose probes are all found wins."""
    cond = check.applies_if
    if isinstance(cond, Probe):
        if not probe(resolver, cond).found:
            return CheckResult(check, True, f"not applicable: no {cond.label}", ())
    elif cond and not resolver.has_module(cond):
        return CheckResult(check, True, f"not applicable: no {cond}", ())
    results: list[ProbeResult] = []
    winner: int | None = None
    for i, alternative in enumerate(check.alternatives):
        found = [probe(resolver, p) for p in alternative]
        results.extend(found)
        if winner is None and all(r.found for r in found):
            winner = i
    variant = None
    if winner is not None and check.variants:
        variant = check.variants[winner]
    return CheckResult(check, winner is not None, variant, tuple(results))


__all__ = ["probe", "run_check"]
