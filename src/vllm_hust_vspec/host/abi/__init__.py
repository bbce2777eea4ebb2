"""Host ABI checks: what vSpec's patches need from vLLM / vllm-ascend, checked statically
(``ast`` over the source, nothing imported) or live (imported classes and signatures).

Used by ``vllm-hust-vspec-doctor`` and, fail closed, by the plugin before it patches::

    report = check_live("eagle", adaptive=True)
    if not report.ok: raise HostAbiError(report)

Importing this package imports neither vllm nor torch.
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_hust_vspec.host.abi.evaluate import run_check
from vllm_hust_vspec.host.abi.live import LiveResolver
from vllm_hust_vspec.host.abi.model import (
    Check,
    CheckResult,
    HostInfo,
    Probe,
    ProbeResult,
    Report,
    TierReport,
)
from vllm_hust_vspec.host.abi.provenance import host_info
from vllm_hust_vspec.host.abi.requirements import (
    ASCEND,
    FEATURES,
    HOSTS,
    METHODS,
    VLLM,
    checks_for,
)
from vllm_hust_vspec.host.abi.source import (
    PackageSource,
    SourceError,
    StaticResolver,
    installed_source,
    sources_from_path,
)

# vLLM speculative method names -> doctor methods.
METHOD_ALIASES = {"draft_model": "draft", "qwen3_5_mtp": "mtp", "eagle-3": "eagle3"}


class HostAbiError(RuntimeError):
    """The host lacks an API a requested vSpec patch needs (raised by the plugin)."""

    def __init__(self, report: Report) -> None:
        self.report = report
        super().__init__(
            "vSpec: this host lacks what the requested patches need: "
            + "; ".join(report.failures())
            + ". Run 'vllm-hust-vspec-doctor --method "
            + f"{report.method}{' --adaptive' if report.adaptive else ''}' for details, "
            "or unset HUST_VSPEC_ENABLED to serve without vSpec."
        )


def normalize_method(method: str) -> str:
    """Doctor method name for a settings / vLLM method name."""
    m = METHOD_ALIASES.get(method, method)
    if m not in METHODS:
        raise ValueError(
            f"method {method!r} has no ABI checks; expected one of {', '.join(METHODS)}"
        )
    return m


def _decide(report: Report) -> None:
    for tier in report.tiers:
        for r in tier.results:
            if r.check.id == "ascend.k_channel" and r.passed and r.variant:
                report.decisions["k_channel"] = r.variant


def check_static(
    method: str,
    adaptive: bool,
    *,
    sources: Iterable[str] = (),
    use_installed: bool = True,
    features: Iterable[str] = (),
) -> Report:
    """Static tier: parse the host packages' source; never import them.

    ``sources``: sdists, checkouts or package directories; packages found there replace the
    installed ones. Raises :class:`SourceError` for a path that holds no host package.
    """
    method = normalize_method(method)
    found: dict[str, PackageSource] = {}
    for path in sources:
        for src in sources_from_path(path, HOSTS):
            found[src.package] = src
    if use_installed:
        for package in HOSTS:
            if package not in found:
                installed = installed_source(package)
                if installed is not None:
                    found[package] = installed
    report = Report(method=method, adaptive=adaptive)
    report.hosts = [host_info(p, found.get(p)) for p in HOSTS]
    present = tuple(p for p in HOSTS if p in found)
    tier = TierReport("static", ran=bool(present))
    if not present:
        tier.skipped_reason = "no host package found"
    else:
        resolver = StaticResolver(list(found.values()))
        checks = checks_for(method, adaptive, present, tuple(features))
        tier.results = [run_check(resolver, c) for c in checks]
    report.tiers.append(tier)
    _decide(report)
    return report


def check_live(
    method: str,
    adaptive: bool,
    *,
    hosts: Iterable[str] | None = None,
    features: Iterable[str] = (),
) -> Report:
    """Live tier: import the host and check names and signatures.

    ``hosts``: which packages to check (default: every host package that imports here). A
    host package that is installed but does not import is reported, not failed, unless it is
    named in ``hosts`` (the plugin names the host it is about to patch).
    """
    method = normalize_method(method)
    resolver = LiveResolver()
    wanted = tuple(hosts) if hosts is not None else None
    report = Report(method=method, adaptive=adaptive)
    present: list[str] = []
    for package in HOSTS:
        info = host_info(package, installed_source(package))
        if info.installed:
            info.importable = resolver.has_package(package)
            info.import_error = resolver.errors.get(package)
            if info.importable:
                mod_version = _module_version(package)
                info.version = info.version or mod_version
                if wanted is None or package in wanted:
                    present.append(package)
        report.hosts.append(info)
    tier = TierReport("live", ran=bool(present))
    missing_wanted = [p for p in (wanted or ()) if p not in present]
    if missing_wanted:
        # The caller is about to patch a host that does not import: a failed requirement.
        tier.results.append(CheckResult(
            Check.of(f"{missing_wanted[0]}.import", missing_wanted[0],
                     "the host package the plugin patches must import",
                     Probe(kind="module", module=missing_wanted[0])),
            False, None,
            (ProbeResult(Probe(kind="module", module=missing_wanted[0]), False,
                         missing=f"module {missing_wanted[0]} "
                                 f"({resolver.errors.get(missing_wanted[0], 'not installed')})"),),
        ))
    if present:
        checks = checks_for(method, adaptive, tuple(present), tuple(features))
        tier.results += [run_check(resolver, c) for c in checks]
    elif not missing_wanted:
        tier.skipped_reason = "no host package imports here"
    report.tiers.append(tier)
    _decide(report)
    return report


def _module_version(package: str) -> str | None:
    import importlib

    try:
        return getattr(importlib.import_module(package), "__version__", None)
    except Exception:  # noqa: BLE001
        return None


def merge(static: Report | None, live: Report | None) -> Report:
    """One report with both tiers (host entries from the live one when it ran)."""
    base = live or static
    assert base is not None
    out = Report(method=base.method, adaptive=base.adaptive)
    out.hosts = list((live or static).hosts)  # type: ignore[union-attr]
    if static is not None and live is not None:
        for h in out.hosts:
            s = static.host(h.package)
            if s is not None and s.installed and s.source != "installed":
                out.hosts[out.hosts.index(h)] = s  # --source replaced the installed one
    for r in (static, live):
        if r is not None:
            out.tiers += r.tiers
            out.decisions.update(r.decisions)
    return out


def render_text(report: Report) -> str:
    """PASS/FAIL lines for humans."""
    lines = [f"vSpec doctor: method={report.method} adaptive={'yes' if report.adaptive else 'no'}"]
    for h in report.hosts:
        if not h.installed:
            lines.append(f"host {h.package}: not installed")
            continue
        parts = [f"host {h.package}: {h.version or 'unknown version'}"]
        if h.distribution:
            parts.append(f"({h.distribution})")
        parts.append(f"[{h.source}] {h.location}")
        if h.git_revision:
            parts.append(f"git {h.git_revision[:12]}{' dirty' if h.git_dirty else ' clean'}")
        if h.importable is False:
            parts.append(f"-- does not import here: {h.import_error}")
        lines.append(" ".join(parts))
    for tier in report.tiers:
        if not tier.ran and not tier.results:
            lines.append(f"[{tier.tier}] skipped: {tier.skipped_reason}")
            continue
        for r in tier.results:
            head = f"[{tier.tier}] {r.status} {r.check.id}"
            if r.variant:
                head += f" ({r.variant})"
            if r.passed:
                lines.append(head)
            else:
                lines.append(f"{head}: missing {' | '.join(r.missing)}")
                lines.append(f"       needed because {r.check.why}")
    for key, value in report.decisions.items():
        lines.append(f"decision {key}: {value}")
    failed = sum(len(t.failed) for t in report.tiers)
    total = sum(len(t.results) for t in report.tiers)
    lines.append(
        f"result: OK ({total} checks)" if report.ok
        else f"result: FAILED ({failed} of {total} required checks failed)"
    )
    return "\n".join(lines) + "\n"


__all__ = [
    "ASCEND",
    "FEATURES",
    "HOSTS",
    "METHODS",
    "VLLM",
    "Check",
    "CheckResult",
    "HostAbiError",
    "HostInfo",
    "Report",
    "SourceError",
    "TierReport",
    "check_live",
    "check_static",
    "merge",
    "normalize_method",
    "render_text",
]
