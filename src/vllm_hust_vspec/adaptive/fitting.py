"""Fit a profile's latency model to measured steps by non-negative least squares.

A sample is one measured decode step (see docs/controller.md, "samples.json")::

    {"batch_size": 32, "gamma": 3, "num_batched_tokens": 128, "context_tokens": 40960,
     "step_s": 0.0213, "draft_s": 0.0041, "target_s": 0.0165}

``draft_s`` and ``target_s`` are optional, but each must be given for every sample or for
none. With them, the target, draft and per-gamma overhead parts are fitted separately;
without, one joint fit of ``step_s`` is made and the per-gamma overhead is folded into
``draft.constant_s`` (the two are indistinguishable from step times alone).

``vllm-hust-vspec-profile`` records its samples with bookkeeping keys (``committed``,
``output_len``, ``repeat``, ``selected``) inside ``measurements.json``; both that file and its
``samples`` list are valid input, and samples marked ``"selected": false`` (repeats the
profiler did not fit) are skipped, so a refit sees what the profiler fitted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._files import read_json_file
from .nnls import dependent_columns, nnls
from .profile import FitInfo, LatencyCoefficients, Profile


class FitError(ValueError):
    """Samples cannot be fitted; the message says what is missing."""


class SamplesFileError(FitError):
    """The samples file cannot be read as a JSON document (missing, binary, not JSON)."""


@dataclass(frozen=True, slots=True)
class FitSample:
    """One measured decode step (context_tokens summed over the batch)."""

    batch_size: int
    gamma: int
    num_batched_tokens: int
    context_tokens: float
    step_s: float
    draft_s: float | None = None
    target_s: float | None = None


@dataclass(frozen=True, slots=True)
class FitResult:
    """A fitted profile and how well it explains the samples."""

    profile: Profile
    residual: float  # RMSE of predicted vs measured step_s, seconds
    relative_residual: float  # residual / mean(step_s)
    max_abs_residual: float  # seconds
    num_samples: int
    mode: str  # which parts were fitted from which measurements


_SAMPLE_KEYS = ("batch_size", "gamma", "num_batched_tokens", "context_tokens", "step_s",
                "draft_s", "target_s")
# Recorded per sample by vllm-hust-vspec-profile; checked, not fitted ("selected" filters).
_BOOKKEEPING_KEYS = ("committed", "output_len", "repeat", "selected")

# measurements.json of vllm-hust-vspec-profile: "samples" is fitted, the rest is provenance.
MEASUREMENTS_SCHEMA = 1
MEASUREMENTS_KEYS = ("schema_version", "tool", "started_at", "duration_s", "host", "models",
                     "settings", "fit", "measured_goodput", "best_gamma",
                     "acceptance_per_position", "cells")

_HINTS = {
    "target.constant_s": "need samples whose step times are not all proportional to the "
                         "token counts",
    "target.per_batched_token_s": "num_batched_tokens must vary (profile several batch sizes "
                                  "and gammas)",
    "target.per_context_token_s": "context_tokens must vary independently of batch size and "
                                  "gamma (or fit without context terms: --no-context-terms)",
    "draft.constant_s": "need samples at two or more gammas, some of them > 0",
    "draft.per_batched_token_s": "need gamma > 0 samples at several batch sizes",
    "draft.per_context_token_s": "context_tokens must vary among gamma > 0 samples (or fit "
                                 "without context terms: --no-context-terms)",
    "per_gamma_overhead_s": "need samples at two or more gammas, some of them > 0",
}

Feature = Callable[[FitSample], float]
_FEATURES: dict[str, Feature] = {
    "target.constant_s": lambda s: 1.0,
    "target.per_batched_token_s": lambda s: float(s.num_batched_tokens),
    "target.per_context_token_s": lambda s: float(s.context_tokens),
    "draft.constant_s": lambda s: float(s.gamma),
    "draft.per_batched_token_s": lambda s: float(s.gamma * s.batch_size),
    "draft.per_context_token_s": lambda s: float(s.gamma) * s.context_tokens,
    "per_gamma_overhead_s": lambda s: float(s.gamma),
}


def parse_samples(data: object, *, source: str = "<samples>") -> list[FitSample]:
    """Validate samples JSON: a list of sample objects, ``{"samples": [...]}``, or the
    profiler's ``measurements.json``. Samples with ``"selected": false`` are skipped."""
    if isinstance(data, dict):
        measurements = "schema_version" in data
        allowed = ("samples", *MEASUREMENTS_KEYS) if measurements else ("samples",)
        extra = sorted(k for k in data if k not in allowed)
        if extra:
            raise FitError(f"{source}: unknown top-level key '{extra[0]}' (allowed: "
                           f"{', '.join(allowed)})")
        version = data.get("schema_version", MEASUREMENTS_SCHEMA)
        if isinstance(version, bool) or version != MEASUREMENTS_SCHEMA:
            raise FitError(f"{source}: measurements schema_version {version!r} is not supported "
                           f"(this version reads {MEASUREMENTS_SCHEMA})")
        if "samples" not in data:
            raise FitError(f"{source}: missing top-level key 'samples'")
        data = data["samples"]
    if not isinstance(data, list):
        raise FitError(f"{source}: expected a list of samples or {{\"samples\": [...]}}, "
                       f"got {type(data).__name__}")
    parsed = [_parse_sample(item, f"samples[{i}]", source) for i, item in enumerate(data)]
    return [s for s in parsed if s is not None]


def load_samples(path: str | Path) -> list[FitSample]:
    """Read and validate a samples JSON file (errors name the file and the key)."""
    p = Path(path)
    return parse_samples(read_json_file(p, "samples", SamplesFileError), source=str(p))


def _parse_sample(item: object, where: str, source: str) -> FitSample | None:
    """One sample, or None for a sample the profiler marked ``"selected": false``."""
    if not isinstance(item, dict):
        raise FitError(f"{source}: {where} must be an object, got {type(item).__name__}")
    for key in item:
        if key not in _SAMPLE_KEYS and key not in _BOOKKEEPING_KEYS:
            raise FitError(f"{source}: key '{where}.{key}': unknown key (allowed: "
                           f"{', '.join(_SAMPLE_KEYS + _BOOKKEEPING_KEYS)})")

    def num(key: str, *, required: bool, integer: bool, positive: bool) -> float | None:
        if key not in item:
            if required:
                raise FitError(f"{source}: missing required key '{where}.{key}'")
            return None
        v = item[key]
        ok = not isinstance(v, bool) and isinstance(v, int if integer else int | float)
        if not ok or not math.isfinite(v) or v < 0 or (positive and v == 0):
            kind = "an integer" if integer else "a number"
            bound = "> 0" if positive else ">= 0"
            raise FitError(f"{source}: key '{where}.{key}': expected {kind} {bound}, got {v!r}")
        return float(v)

    num("committed", required=False, integer=False, positive=False)
    num("output_len", required=False, integer=True, positive=True)
    num("repeat", required=False, integer=True, positive=False)
    selected = item.get("selected", True)
    if not isinstance(selected, bool):
        raise FitError(f"{source}: key '{where}.selected': expected true or false, "
                       f"got {selected!r}")
    batch = int(num("batch_size", required=True, integer=True, positive=True) or 0)
    gamma = int(num("gamma", required=True, integer=True, positive=False) or 0)
    nbt = num("num_batched_tokens", required=False, integer=True, positive=True)
    ctx = num("context_tokens", required=False, integer=False, positive=False)
    step = num("step_s", required=True, integer=False, positive=True)
    assert step is not None
    if not selected:
        return None
    return FitSample(
        batch_size=batch,
        gamma=gamma,
        num_batched_tokens=int(nbt) if nbt is not None else batch * (1 + gamma),
        context_tokens=ctx if ctx is not None else 0.0,
        step_s=step,
        draft_s=num("draft_s", required=False, integer=False, positive=False),
        target_s=num("target_s", required=False, integer=False, positive=True),
    )


def _all_or_none(samples: Sequence[FitSample], attr: str) -> bool:
    have = [getattr(s, attr) is not None for s in samples]
    if all(have):
        return True
    if any(have):
        missing = have.index(False)
        raise FitError(f"{attr} is given for some samples but not for samples[{missing}]; give "
                       "it for every sample or for none")
    return False


def _fit_part(
    samples: Sequence[FitSample], names: list[str], y: list[float], part: str
) -> dict[str, float]:
    if not names:
        return {}
    cols = [[_FEATURES[n](s) for s in samples] for n in names]
    for j in dependent_columns(cols):
        raise FitError(f"cannot identify {names[j]} from {part}: {_HINTS[names[j]]} (in these "
                       "samples its column is a linear combination of the others)")
    return dict(zip(names, nnls(cols, y), strict=True))


def fit_profile(
    samples: Sequence[FitSample],
    *,
    context_terms: bool = True,
    default_acceptance: Sequence[float] = (0.6,),
    assumed_context_tokens: int | None = None,
    name: str = "",
    method: str = "",
) -> FitResult:
    """Fit the schema-v1 latency model to ``samples`` (all coefficients >= 0).

    ``assumed_context_tokens`` defaults to the mean context per request over the samples.
    Raises FitError naming what is missing when the samples are too few or cannot separate a
    coefficient (e.g. a single gamma, or context that never varies).
    """
    samples = list(samples)
    has_draft = _all_or_none(samples, "draft_s")
    has_target = _all_or_none(samples, "target_s")
    target_names = ["target.constant_s", "target.per_batched_token_s"]
    draft_names = ["draft.constant_s", "draft.per_batched_token_s"]
    if context_terms:
        target_names.append("target.per_context_token_s")
        draft_names.append("draft.per_context_token_s")
    parts: list[tuple[list[str], list[float], str]] = []
    step = [s.step_s for s in samples]
    if has_draft:
        parts.append((draft_names, [s.draft_s or 0.0 for s in samples], "draft_s"))
    if has_target:
        parts.append((target_names, [s.target_s or 0.0 for s in samples], "target_s"))
    if has_draft and has_target:
        rest = [s.step_s - (s.draft_s or 0.0) - (s.target_s or 0.0) for s in samples]
        parts.append((["per_gamma_overhead_s"], rest, "step_s - draft_s - target_s"))
        mode = "split: target_s, draft_s, overhead from the remainder"
    elif has_draft:
        rest = [s.step_s - (s.draft_s or 0.0) for s in samples]
        parts.append(([*target_names, "per_gamma_overhead_s"], rest, "step_s - draft_s"))
        mode = "split: draft_s; target and overhead from step_s - draft_s"
    elif has_target:
        rest = [s.step_s - (s.target_s or 0.0) for s in samples]
        parts.append((draft_names, rest, "step_s - target_s"))
        mode = "split: target_s; draft (overhead folded in) from step_s - target_s"
    else:
        parts.append((target_names + draft_names, step, "step_s"))
        mode = "joint: step_s only (per-gamma overhead folded into draft.constant_s)"
    widest = max(len(names) for names, _, _ in parts)
    if len(samples) < widest + 1:
        names = max(parts, key=lambda p: len(p[0]))[0]
        raise FitError(f"need at least {widest + 1} samples to fit {widest} coefficients "
                       f"({', '.join(names)}), got {len(samples)}")
    coef: dict[str, float] = {}
    for names, y, part in parts:
        coef.update(_fit_part(samples, names, y, part))

    def c(key: str) -> float:
        return coef.get(key, 0.0)

    target = LatencyCoefficients(c("target.constant_s"), c("target.per_batched_token_s"),
                                 c("target.per_context_token_s"))
    draft = LatencyCoefficients(c("draft.constant_s"), c("draft.per_batched_token_s"),
                                c("draft.per_context_token_s"))
    overhead = c("per_gamma_overhead_s")
    errors = [predict_step(target, draft, overhead, s) - s.step_s for s in samples]
    rmse = math.sqrt(math.fsum(e * e for e in errors) / len(errors))
    mean_step = math.fsum(step) / len(step)
    rel = rmse / mean_step if mean_step > 0 else 0.0
    if assumed_context_tokens is None:
        per_req = [s.context_tokens / s.batch_size for s in samples]
        assumed_context_tokens = round(math.fsum(per_req) / len(per_req))
    profile = Profile(
        target=target, draft=draft, per_gamma_overhead_s=overhead,
        assumed_context_tokens=assumed_context_tokens,
        default_acceptance=tuple(float(a) for a in default_acceptance),
        name=name, method=method,
        fit=FitInfo(num_samples=len(samples), residual_rmse_s=rmse, relative_residual=rel),
    )
    # Round-trip through the validator so a fitted profile is always a loadable one.
    profile = Profile.from_dict(profile.to_dict(), source="<fitted profile>")
    return FitResult(profile=profile, residual=rmse, relative_residual=rel,
                     max_abs_residual=max(abs(e) for e in errors), num_samples=len(samples),
                     mode=mode)


def predict_step(
    target: LatencyCoefficients, draft: LatencyCoefficients, overhead: float, s: FitSample
) -> float:
    """Model step time for a sample's exact shape (its own num_batched_tokens)."""
    t = target.seconds(s.num_batched_tokens, s.context_tokens)
    if s.gamma > 0:
        t += s.gamma * (draft.seconds(s.batch_size, s.context_tokens) + overhead)
    return t

