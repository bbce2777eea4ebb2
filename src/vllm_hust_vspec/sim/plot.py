"""Optional matplotlib figure: gamma over time and goodput per policy."""

from __future__ import annotations

from typing import Any

from ..plotting import PlotUnavailable, load_pyplot, moving_average
from .runner import ScenarioReport


def plot_report(report: ScenarioReport, out_path: str) -> None:
    """Draw gamma over time (first seed, moving average) and mean goodput (+- std)."""
    plt = load_pyplot()
    fig: Any
    fig, (ax_g, ax_p) = plt.subplots(2, 1, figsize=(10, 8))
    for summary in report.policies:
        run = next((r for r in summary.runs if r.timeline), None)
        if run is None or summary.policy.startswith("fixed:"):
            continue
        ts = run.timeline["t"]
        gs = moving_average(run.timeline["gamma"], 25)
        ax_g.plot(ts, gs, label=summary.policy, linewidth=1.0)
    ax_g.set_xlabel("simulated time (s)")
    ax_g.set_ylabel("gamma (25-step moving average)")
    ax_g.set_title(f"{report.scenario}: gamma over time (seed {report.seeds[0]})")
    ax_g.legend(fontsize="small", ncol=3)
    names = [s.policy for s in report.policies]
    means = [s.goodput_mean for s in report.policies]
    stds = [s.goodput_std for s in report.policies]
    colors = ["tab:gray" if n.startswith("fixed:") else "tab:blue" for n in names]
    ax_p.bar(range(len(names)), means, yerr=stds, color=colors)
    ax_p.set_xticks(range(len(names)))
    ax_p.set_xticklabels(names, rotation=35, ha="right", fontsize="small")
    ax_p.set_ylabel("goodput (tokens / busy s)")
    if report.best_fixed_policy:
        ax_p.set_title(f"goodput per policy (best fixed: {report.best_fixed_policy})")
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)


__all__ = ["PlotUnavailable", "plot_report"]
