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
    NOT_IN_SOURCE,
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
    K_PARAM,
    METHODS,
    VLLM,
    checks_for,
)
from vllm_hust_vspec.host.abi.source import (
    PackageSource,
    SourceError,
    StaticResolver,
    installed_source,
    overlay,
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


# ascend.k_shape.proposer variants (in order) -> the K channel vSpec's installer picks from
# the base proposer's _propose (host/worker/ascend/proposer.py).
_SHAPE_CHANNEL = ("native", "backport", None)


def _decide(report: Report) -> None:
    shapes: dict[str, CheckResult] = {}
    for tier in report.tiers:
        for r in tier.results:
            if r.check.id == "ascend.k_channel" and r.passed and r.variant:
                report.decisions["k_channel"] = r.variant
            elif r.check.id.startswith("ascend.k_shape.") and r.passed:
                shapes[r.check.id] = r
    proposer, runner = shapes.get("ascend.k_shape.proposer"), shapes.get("ascend.k_shape.runner")
    if proposer is None or proposer.variant is None:
        return
    channel = _SHAPE_CHANNEL[proposer.check.variants.index(proposer.variant)]
    if channel is None:
        return
    # A partial tree cannot decide ascend.k_channel (the method's proposer class may be
    # absent); the base proposer's signature, which the installer reads, still does.
    report.decisions.setdefault("k_channel", channel)
    runner_k = runner is not None and runner.variant == runner.check.variants[0]
    if runner_k and channel == "backport":
        report.decisions["k_shapes"] = (
            f"the runner passes {K_PARAM}= but _propose is K-less: runner and proposer come "
            "from different code lines; the K backport takes the keyword as the step's "
            "gamma (without vSpec's adaptive gamma the host would fail on it)")
    elif runner_k:
        report.decisions["k_shapes"] = "runner and proposer both carry K (native)"
    elif channel == "native":
        report.decisions["k_shapes"] = (
            f"_propose takes {K_PARAM} but the runner does not pass it: the proposer drafts "
            "its configured K")


def check_static(
    method: str,
    adaptive: bool,
    *,
    sources: Iterable[str] = (),
    use_installed: bool = True,
    features: Iterable[str] = (),
    facts: bool = True,
) -> Report:
    """Static tier: parse the host packages' source; never import them.

    ``sources``: sdists, checkouts or package directories; packages found there replace the
    installed ones (two partial trees of one package are read as one, the first given
    winning). Raises :class:`SourceError` for a path that holds no host package.
    ``facts``: also report what a vllm-ascend source does with per-step gamma.
    """
    method = normalize_method(method)
    found: dict[str, PackageSource] = {}
    for path in sources:
        for src in sources_from_path(path, HOSTS):
            prior = found.get(src.package)
            if prior is not None and (prior.partial or src.partial):
                src = overlay(prior, src)
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
        checks = checks_for(method, adaptive, present, tuple(features), facts=facts)
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
    facts: bool = False,
) -> Report:
    """Live tier: import the host and check names and signatures (``facts``: as for
    :func:`check_static`; the plugin's own check leaves them out).

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
        checks = checks_for(method, adaptive, tuple(present), tuple(features), facts=facts)
        tier.results += [run_check(resolver, c) for c in checks]
    elif not missing_wanted:
        tier.skipped_reason = "no host package imports here"
    report.tiers.append(tier)
    if resolver.looked_through:
        # Other plugins' wrappers sit on host methods: the checks read the host's code under
        # them; say so, so a reader knows the live answers are not the wrappers'.
        report.decisions["live_probes"] = "; ".join(dict.fromkeys(resolver.looked_through))
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
        if h.partial:
            parts.append("-- partial tree (no __init__.py): what it lacks is reported as "
                         "not in this source")
        lines.append(" ".join(parts))
        if h.note:
            lines.append(f"  {h.package}: {h.note}")
    for tier in report.tiers:
        if not tier.ran and not tier.results:
            lines.append(f"[{tier.tier}] skipped: {tier.skipped_reason}")
            continue
        for r in tier.results:
            head = f"[{tier.tier}] {r.status} {r.check.id}"
            if r.check.fact and r.passed:
                lines.append(f"{head}: {r.variant}")
            elif r.variant:
                lines.append(head + f" ({r.variant})")
            elif r.passed:
                lines.append(head)
            elif r.unread:
                lines.append(f"{head}: {NOT_IN_SOURCE}: {' | '.join(r.unread)}")
            else:
                # one probe per method of a missing module would repeat its name
                lines.append(f"{head}: missing {' | '.join(dict.fromkeys(r.missing))}")
                lines.append(f"       needed because {r.check.why}")
    for key, value in report.decisions.items():
        lines.append(f"decision {key}: {value}")
    lines.append(_result_line(report))
    return "\n".join(lines) + "\n"


def _result_line(report: Report) -> str:
    failed = sum(len(t.failed) for t in report.tiers)
    unread = sum(len(t.unread) for t in report.tiers)
    total = sum(len(t.results) for t in report.tiers)
    tail = f"; {unread} not in this source, unverified" if unread else ""
    if report.ok:
        return f"result: OK ({total} checks{tail})"
    return f"result: FAILED ({failed} of {total} required checks failed{tail})"


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
