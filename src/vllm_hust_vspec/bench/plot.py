"""Optional matplotlib figure of a pair run: throughput bars, per-position acceptance, gamma
over time from the vSpec server's controller trace."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vllm_hust_vspec.plotting import PlotUnavailable, load_pyplot, moving_average


def read_trace(path: Path) -> list[dict[str, Any]]:
    """Records of a controller trace (JSON Lines); unreadable lines are skipped."""
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "t" in rec:
            out.append(rec)
    return out


def gamma_series(records: Sequence[dict[str, Any]], window: int = 9) -> tuple[
    list[float], list[float]
]:
    """(seconds since the first step, moving average of the decided gamma)."""
    if not records:
        return [], []
    t0 = float(records[0]["t"])
    ts = [float(r["t"]) - t0 for r in records]
    gs = [float(r.get("decided", r.get("gamma", 0))) for r in records]
    return ts, moving_average(gs, window)


def plot_pair(summary: dict[str, Any], traces: Sequence[Path], out_path: str | Path) -> None:
    """Three panels: throughput per repetition and arm, per-position acceptance, gamma."""
    plt = load_pyplot()
    fig: Any
    fig, (ax_t, ax_a, ax_g) = plt.subplots(3, 1, figsize=(9, 11))
    runs = summary.get("runs", {})
    labels = {"baseline": "target-only", "vspec": "vSpec"}
    colors = {"baseline": "tab:gray", "vspec": "tab:blue"}
    x = 0
    ticks: list[int] = []
    names: list[str] = []
    for arm in ("baseline", "vspec"):
        for r in runs.get(arm, []):
            ax_t.bar(x, r["output_throughput"], color=colors[arm])
            ticks.append(x)
            names.append(f"{labels[arm]} r{r.get('repetition', '?')}")
            x += 1
        x += 1
    cmp = summary.get("comparison") or {}
    ax_t.set_xticks(ticks)
    ax_t.set_xticklabels(names, rotation=20, ha="right", fontsize="small")
    ax_t.set_ylabel("output throughput (tok/s)")
    speed = cmp.get("speedup")
    ax_t.set_title("throughput per run" + (f" (median ratio {speed:.3f}x)" if speed else ""))
    acc = summary.get("acceptance") or {}
    pos = acc.get("per_position_acceptance") or []
    if pos:
        ax_a.bar(range(len(pos)), pos, color="tab:green")
        ax_a.set_xticks(range(len(pos)))
        ax_a.set_ylim(0, 1)
    ax_a.set_xlabel("draft position")
    ax_a.set_ylabel("acceptance rate")
    source = {"vspec": "vspec_ counters", "vllm": "vllm:spec_decode counters"}.get(
        acc.get("source") or "", "no data")
    ax_a.set_title(f"per-position acceptance (vSpec, from {source})")
    for i, path in enumerate(traces):
        ts, gs = gamma_series(read_trace(Path(path)))
        if ts:
            ax_g.plot(ts, gs, linewidth=0.8, marker=".", markersize=2, label=f"r{i + 1}")
    ax_g.set_xlabel("seconds since the first traced step")
    ax_g.set_ylabel("decided gamma (moving average)")
    ax_g.set_title("gamma over time (vSpec controller trace)")
    if traces:
        ax_g.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(str(out_path), dpi=110)
    plt.close(fig)


__all__ = ["PlotUnavailable", "gamma_series", "plot_pair", "read_trace"]
