"""A host step-cost model: linear in its coefficients, with graph capture sizes and admission.

Calibrated from measured runs (``sim/calibration/fit.py``): every coefficient multiplies one
*feature* of the step, so a fit over recorded steps is a linear least-squares problem
(:meth:`HostCost.features` gives the features, :meth:`HostCost.step_time` their weighted sum).

A step verifies ``V`` drafts over ``B`` decoding requests, prefills ``P`` prompt tokens and then
drafts ``g`` tokens for ``D`` requests (the decision of this step):

* target: ``target_base_ms`` + ``target_per_request_ms`` x ``B`` (what scales with requests
  rather than tokens: attention metadata, sampling, host bookkeeping) +
  ``target_per_token_ms`` x the target's decode tokens ``B + V``,
  padded up to the next of ``capture_sizes`` when the step is decode only (a FULL graph replays
  the captured size; above the largest size, or with prefill in the step, nothing is padded),
  + ``prefill_per_token_ms`` x ``P``;
* drafting (``g > 0`` and ``D > 0``, or the sync zero's single pass): ``spec_overhead_ms``
  (the host stages of the speculative path) + ``g`` x (``draft_pass_ms`` +
  ``draft_pass_per_request_ms`` x ``D``) + ``draft_ingest_per_token_ms`` x ``(B + V + P)``;
* admission (``P > 0``): ``admission_ms`` per step that admits requests (a mixed step outside
  the captured graphs), + ``offpath_pass_ms`` x ``g`` when ``g`` is not one of
  ``native_gammas`` (the host drafts such a step without its graphs; empty: every gamma is
  native);
* eager decode (``P == 0``, ``g > 0`` and ``D > 0``, ``g`` not one of a non-empty
  ``native_gammas``): ``eager_step_ms`` + ``eager_per_request_ms`` x ``B``, what a decode step
  pays when the host captured no graph for its draft width and runs it eager (a partial-graph
  host). The calibration does not fit these two (they are not among ``fit.py``'s columns);
  they default to 0, which leaves every calibrated scenario as it was, and the hypothetical
  partial-graph hosts of ``sim/calibration/family.py`` set them.

In a scenario's ``cost`` object every coefficient but ``target_base_ms`` is optional (default
0); :meth:`HostCost.to_json` writes the two eager terms only when non-zero, so the calibrated
scenario files stay as they were written.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ._strict import StrictObject

# The coefficients in feature order (every one in milliseconds per unit of its feature).
HOST_COST_TERMS = (
    "target_base_ms",
    "target_per_request_ms",
    "target_per_token_ms",
    "prefill_per_token_ms",
    "spec_overhead_ms",
    "draft_pass_ms",
    "draft_pass_per_request_ms",
    "draft_ingest_per_token_ms",
    "admission_ms",
    "offpath_pass_ms",
    # last, so the calibration's feature columns keep their indices (fit.py never fits them)
    "eager_step_ms",
    "eager_per_request_ms",
)
# Terms :meth:`HostCost.to_json` leaves out at 0 (older scenario files have no such key).
OPTIONAL_TERMS = ("eager_step_ms", "eager_per_request_ms")


@dataclass(frozen=True, slots=True)
class HostCost:
    """Step time = sum of coefficient x feature (ms), see the module docstring."""

    target_base_ms: float
    target_per_token_ms: float
    target_per_request_ms: float = 0.0
    prefill_per_token_ms: float = 0.0
    spec_overhead_ms: float = 0.0
    draft_pass_ms: float = 0.0
    draft_pass_per_request_ms: float = 0.0
    draft_ingest_per_token_ms: float = 0.0
    admission_ms: float = 0.0
    offpath_pass_ms: float = 0.0
    eager_step_ms: float = 0.0
    eager_per_request_ms: float = 0.0
    capture_sizes: tuple[int, ...] = ()
    native_gammas: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if list(self.capture_sizes) != sorted(set(self.capture_sizes)):
            raise ValueError("capture_sizes must be strictly increasing")
        if any(getattr(self, name) < 0.0 for name in HOST_COST_TERMS):
            raise ValueError("host cost coefficients must be >= 0")

    @property
    def coefficients(self) -> tuple[float, ...]:
        """The coefficients in :data:`HOST_COST_TERMS` order."""
        return tuple(float(getattr(self, name)) for name in HOST_COST_TERMS)

    def padded(self, tokens: int) -> int:
        """``tokens`` padded up to the next capture size (unchanged above the largest)."""
        sizes = self.capture_sizes
        if not sizes or tokens > sizes[-1]:
            return tokens
        return sizes[bisect.bisect_left(sizes, tokens)]

    def features(
        self,
        num_decode: int,
        verify_tokens: int,
        gamma_draft: int,
        num_drafting: int,
        prefill_tokens: int,
        *,
        zero_pass: bool = False,
    ) -> tuple[float, ...]:
        """The step's features in :data:`HOST_COST_TERMS` order."""
        decode_tokens = num_decode + verify_tokens
        target_tokens = decode_tokens if prefill_tokens else self.padded(decode_tokens)
        passes = gamma_draft if gamma_draft > 0 else (1 if zero_pass else 0)
        drafting = passes > 0 and num_drafting > 0
        admitting = prefill_tokens > 0
        uncaptured = (gamma_draft > 0 and bool(self.native_gammas)
                      and gamma_draft not in self.native_gammas)
        offpath = admitting and uncaptured
        # a decode-only step drafting at a width without a graph runs eager
        eager = not admitting and uncaptured and num_drafting > 0
        return (
            1.0,
            float(num_decode),
            float(target_tokens),
            float(prefill_tokens),
            1.0 if drafting else 0.0,
            float(passes) if drafting else 0.0,
            float(passes * num_drafting) if drafting else 0.0,
            float(decode_tokens + prefill_tokens) if drafting else 0.0,
            1.0 if admitting else 0.0,
            float(gamma_draft) if offpath else 0.0,
            1.0 if eager else 0.0,
            float(num_decode) if eager else 0.0,
        )

    def step_time(
        self,
        num_decode: int,
        verify_tokens: int,
        gamma_draft: int,
        num_drafting: int,
        prefill_tokens: int,
        context_tokens: int,
        *,
        zero_pass: bool = False,
    ) -> float:
        """Seconds for one step (context length is not a term: see the module docstring)."""
        feats = self.features(num_decode, verify_tokens, gamma_draft, num_drafting,
                              prefill_tokens, zero_pass=zero_pass)
        return sum(c * f for c, f in zip(self.coefficients, feats, strict=True)) * 1e-3

    def steady_time(self, batch: int, gamma: int, context_tokens: int) -> float:
        """Decode-only step at ``batch`` verifying and drafting ``gamma``."""
        return self.step_time(batch, batch * gamma, gamma, batch, 0, context_tokens)

    def to_json(self) -> dict[str, object]:
        """The scenario ``cost`` object of this model."""
        out: dict[str, object] = {"type": "host"}
        for name in HOST_COST_TERMS:
            value = round(float(getattr(self, name)), 6)
            if value or name not in OPTIONAL_TERMS:
                out[name] = value
        if self.capture_sizes:
            out["capture_sizes"] = list(self.capture_sizes)
        if self.native_gammas:
            out["native_gammas"] = list(self.native_gammas)
        return out


def parse_host_cost(c: StrictObject) -> HostCost:
    """Parse a ``{"type": "host", ...}`` cost object (the caller checked ``type``)."""
    values = {name: c.number(name, 0.0, lo=0.0) for name in HOST_COST_TERMS}
    if not c.has("target_base_ms"):
        raise c.error("target_base_ms", "required for a host cost model")
    sizes = tuple(int(v) for v in c.numbers("capture_sizes", lo=1.0)) \
        if c.has("capture_sizes") else ()
    if list(sizes) != sorted(set(sizes)):
        raise c.error("capture_sizes", "must be strictly increasing")
    natives = tuple(int(v) for v in c.numbers("native_gammas", lo=0.0)) \
        if c.has("native_gammas") else ()
    return HostCost(capture_sizes=sizes, native_gammas=natives, **values)


def describe_host_cost(cost: HostCost) -> str:
    """One-line summary for reports."""
    return (f"host (target {cost.target_base_ms:.1f} ms + {cost.target_per_token_ms:.3f} "
            f"ms/token, {len(cost.capture_sizes)} capture sizes, draft pass "
            f"{cost.draft_pass_ms:.1f} ms, admission {cost.admission_ms:.0f} ms"
            + (f", eager {cost.eager_step_ms:.1f} ms + {cost.eager_per_request_ms:.3f} "
               f"ms/request off native gammas {list(cost.native_gammas)}"
               if cost.eager_step_ms or cost.eager_per_request_ms else "")
            + ")")
