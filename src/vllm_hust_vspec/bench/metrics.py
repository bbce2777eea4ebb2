"""Speculative-decoding figures from a server's Prometheus ``/metrics`` text.

Two scrapes (before and after the measured load) are subtracted, so warm-up traffic and
earlier runs do not count. Sources:

* vLLM: ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
  ``..._num_accepted_tokens_total``, ``..._num_accepted_tokens_per_pos_total{position}``.
* vSpec: ``vspec_draft_tokens_per_pos_total{position}``,
  ``vspec_accepted_tokens_per_pos_total{position}``, ``vspec_gamma_steps_total{gamma}``,
  ``vspec_refill_holds_total``.
  With a variable gamma, vLLM has no drafted-per-position counter, so vLLM's per-position
  rate (accepted / drafts) understates deep positions; vSpec's counters give the exact
  rate accepted[k] / drafted[k]. They appear on ``/metrics`` when the server runs with
  ``PROMETHEUS_MULTIPROC_DIR`` set (the benchmark sets it for the servers it starts).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Sample = tuple[str, tuple[tuple[str, str], ...]]

VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_ACCEPTED_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
VSPEC_DRAFT_POS = "vspec_draft_tokens_per_pos_total"
VSPEC_ACCEPTED_POS = "vspec_accepted_tokens_per_pos_total"
VSPEC_GAMMA_STEPS = "vspec_gamma_steps_total"
VSPEC_REFILL_HOLDS = "vspec_refill_holds_total"


def parse_prometheus(text: str) -> dict[Sample, float]:
    """Samples of a Prometheus text exposition: ``(name, sorted labels) -> value``.

    Parsed by ``prometheus_client.parser`` (every vLLM host has it) when it is installed;
    sample names keep their suffixes (``_total``, ``_created``, ``_bucket``). A malformed
    line makes the library reject the whole text, so then the text is parsed again one line
    at a time and only the bad lines are skipped, as a scrape must not lose every counter to
    one odd line.
    """
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:  # a bench client host without vLLM: the stand-in reader
        return _parse_by_hand(text)
    try:
        return _samples(text_string_to_metric_families(text))
    except ValueError:
        out: dict[Sample, float] = {}
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    out.update(_samples(text_string_to_metric_families(line + "\n")))
                except ValueError:
                    continue
        return out


def _samples(families: Iterable[Any]) -> dict[Sample, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for family in families
        for s in family.samples
    }


def _parse_labels(text: str) -> tuple[tuple[str, str], ...]:
    labels: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        eq = text.find("=", i)
        if eq < 0:
            break
        name = text[i:eq].strip().lstrip(",").strip()
        j = eq + 2  # past '="'
        value = []
        while j < len(text) and text[j] != '"':
            if text[j] == "\\" and j + 1 < len(text):
                j += 1
            value.append(text[j])
            j += 1
        labels.append((name, "".join(value)))
        i = j + 1
    return tuple(sorted(labels))


def _parse_by_hand(text: str) -> dict[Sample, float]:
    """The exposition format read directly, for hosts without ``prometheus_client``."""
    out: dict[Sample, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            labels_text, _, tail = rest.rpartition("}")
            labels = _parse_labels(labels_text)
        else:
            name, _, tail = line.partition(" ")
            labels = ()
        parts = tail.split()
        if not parts:
            continue
        try:
            out[(name.strip(), labels)] = float(parts[0])
        except ValueError:
            continue
    return out


def total(samples: Mapping[Sample, float], name: str) -> float:
    """Sum of a metric over all label sets."""
    return sum(v for (n, _), v in samples.items() if n == name)


def by_label(samples: Mapping[Sample, float], name: str, label: str) -> dict[int, float]:
    """A metric summed per integer value of one label (e.g. ``position``)."""
    out: dict[int, float] = {}
    for (n, labels), v in samples.items():
        if n != name:
            continue
        value = dict(labels).get(label)
        if value is None:
            continue
        try:
            key = int(value)
        except ValueError:
            continue
        out[key] = out.get(key, 0.0) + v
    return out


def diff(after: Mapping[Sample, float], before: Mapping[Sample, float]) -> dict[Sample, float]:
    """Counter increase between two scrapes (samples missing before count from 0)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


@dataclass(frozen=True)
class SpecFigures:
    """Acceptance over one measured window."""

    num_drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_length: float | None  # 1 + accepted / drafts (vLLM's definition)
    acceptance_rate: float | None  # accepted / draft tokens
    per_position: list[float]  # accepted[k] / drafted[k] (vSpec) or / drafts (vLLM)
    per_position_source: str  # "vspec" | "vllm" | ""
    gamma_steps: dict[int, float]  # vspec_gamma_steps by chosen gamma
    refill_holds: float = 0.0  # steps where cohort refill held waiting requests back

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_drafts": self.num_drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_length": self.acceptance_length,
            "acceptance_rate": self.acceptance_rate,
            "per_position_acceptance": self.per_position,
            "per_position_source": self.per_position_source,
            "gamma_steps": {str(k): v for k, v in sorted(self.gamma_steps.items())},
            "refill_holds": self.refill_holds,
        }


def spec_figures(window: Mapping[Sample, float]) -> SpecFigures:
    """Acceptance figures from counter increases over the measured window."""
    drafts = total(window, VLLM_DRAFTS)
    draft_tokens = total(window, VLLM_DRAFT_TOKENS)
    accepted = total(window, VLLM_ACCEPTED)
    d_pos = by_label(window, VSPEC_DRAFT_POS, "position")
    a_pos = by_label(window, VSPEC_ACCEPTED_POS, "position")
    per_pos: list[float] = []
    source = ""
    if any(d_pos.values()):
        width = max(k for k, v in d_pos.items() if v) + 1
        per_pos = [a_pos.get(k, 0.0) / d_pos[k] if d_pos.get(k) else 0.0 for k in range(width)]
        source = "vspec"
    else:
        v_pos = by_label(window, VLLM_ACCEPTED_POS, "position")
        if drafts and v_pos:
            per_pos = [v_pos.get(k, 0.0) / drafts for k in range(max(v_pos) + 1)]
            source = "vllm"
    return SpecFigures(
        num_drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        acceptance_length=1.0 + accepted / drafts if drafts else None,
        acceptance_rate=accepted / draft_tokens if draft_tokens else None,
        per_position=per_pos,
        per_position_source=source,
        gamma_steps=by_label(window, VSPEC_GAMMA_STEPS, "gamma"),
        refill_holds=total(window, VSPEC_REFILL_HOLDS),
    )


def scrape(base_url: str, timeout_s: float = 10.0) -> dict[Sample, float]:
    """GET ``{base_url}/metrics`` and parse it; empty when unavailable."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/metrics", timeout=timeout_s) as r:
            return parse_prometheus(r.read().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return {}


def figures_from_vllm_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """The spec-decode keys ``vllm bench serve`` itself writes, when present."""
    keys = ("spec_decode_acceptance_rate", "spec_decode_acceptance_length",
            "spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
            "spec_decode_per_position_acceptance_rates")
    return {k: result[k] for k in keys if k in result}


def spec_samples(samples: Mapping[Sample, float]) -> dict[str, float]:
    """The vspec_ and spec_decode samples, keyed ``name{label="value",...}`` (raw results)."""
    out: dict[str, float] = {}
    for (name, labels), value in sorted(samples.items()):
        if name.startswith(("vspec_", "vllm:spec_decode")):
            inner = ",".join(f'{k}="{v}"' for k, v in labels)
            out[f"{name}{{{inner}}}" if labels else name] = value
    return out


__all__ = [
    "SpecFigures",
    "by_label",
    "diff",
    "parse_prometheus",
    "scrape",
    "spec_figures",
    "spec_samples",
    "total",
]
