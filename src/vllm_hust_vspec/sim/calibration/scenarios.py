"""The calibrated NPU scenarios and the calibration record (what ``calibrate-npu`` writes).

Two scenarios, loadable by name (``sim/scenarios_npu/``, kept out of the policy suite so its
targets keep their meaning):

* ``npu-b128-gsm8k-draft``: Qwen2.5-14B + Qwen2.5-0.5B draft model, gamma 0..4;
* ``npu-b128-gsm8k-eagle``: Qwen2.5-14B + its EAGLE head, gamma 0..2 (the range measured).

Both carry the exact GSM8K workload (the target-only run's per-request lengths: the strict
greedy outputs; all 200 queued, at most 128 running), the host of 0.14.3's online runs
(its refill, graph capture sizes, native gamma 2, token budget) and the calibrated acceptance
and step costs. The record (``sim/data/npu_calibration.json``) keeps every fitted coefficient,
the fitted throughput of every measured configuration and the sources, so the calibration is
reproducible and checkable (tests/sim/calibration/test_sim_npu_calibration.py).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ...adaptive._limits import bucket_batches
from ...adaptive.admission import REFILL_MAX_HOLD_STEPS
from ...adaptive.fitting import FitSample, fit_profile
from ..scenario import Scenario, parse_scenario
from .fit import METHODS, Calibration, FitOptions, Prediction, predict
from .measurements import DATA_PACKAGE, Measurements
from .simulate import AcceptParams

SCENARIO_DIR = "scenarios_npu"
RECORD_NAME = "npu_calibration.json"
# The configuration whose host (refill, captures, budget) each scenario describes.
HOST_OF = {"draft": "draft-online", "eagle": "eagle-online"}
DESCRIPTIONS = {
    "draft": "Calibrated on 0.14.3's Ascend runs (one NPU, Qwen2.5-14B-Instruct + "
             "Qwen2.5-0.5B-Instruct draft model, BF16, FULL graphs, async): the exact GSM8K "
             "workload (first 200 prompts, max 512 tokens, 200 queued, B128), the host of its "
             "online run (refill 8, exact graph capture sizes, native gamma 2), acceptance and "
             "step costs fitted by vllm-hust-vspec-sim calibrate-npu (docs/simulator.md).",
    "eagle": "Calibrated on 0.14.3's Ascend runs (one NPU, Qwen2.5-14B-Instruct + "
             "its EAGLE head, BF16, FULL graphs, async): the exact GSM8K workload (first 200 "
             "prompts, max 512 tokens, 200 queued, B128), the host of its online run (refill "
             "4, its graph capture sizes, native gamma 2), acceptance and step costs fitted by "
             "vllm-hust-vspec-sim calibrate-npu; gamma above 2 was never measured.",
}


def scenario_name(method: str) -> str:
    """``npu-b128-gsm8k-<method>``."""
    return f"npu-b128-gsm8k-{method}"


def scenario_doc(cal: Calibration, data: Measurements, method: str) -> dict[str, Any]:
    """The scenario JSON of ``method``: the online run's host, target-only lengths, gamma
    0..max with vSpec's sticky gamma 0 (a zero skips the drafter: target-only steps)."""
    host = data.get(HOST_OF[method])
    lengths = data.get("target-only").output_lengths
    doc: dict[str, Any] = {
        "schema_version": 1,
        "name": scenario_name(method),
        "description": DESCRIPTIONS[method],
        "seed": 1,
        "tags": ["stationary", "calibrated", "npu"],
        "min_gamma": 0,
        "max_gamma": host.max_gamma,
        "max_num_seqs": 128,
        "max_num_batched_tokens": host.max_num_batched_tokens,
        "gamma0": "sticky",
        "refill_batch": host.refill,
        # vSpec's host: holds when they pay, at most REFILL_MAX_HOLD_STEPS steps in a row
        "refill_hold": "auto",
        "refill_max_hold_steps": REFILL_MAX_HOLD_STEPS,
        "workload": {
            "num_requests": len(lengths),
            "arrival": {"type": "closed", "concurrency": len(lengths)},
            "prompt_len": {"type": "list", "values": list(data.prompt_lengths)},
            "output_len": {"type": "list", "values": list(lengths)},
        },
        "acceptance": cal.accept_for(host).to_json(),
        "cost": cal.cost(host, data).to_json(),
    }
    parse_scenario(doc, scenario_name(method))  # the writer never ships an invalid file
    return doc


def record_doc(cal: Calibration, data: Measurements,
               fitted: list[Prediction]) -> dict[str, Any]:
    """The calibration record: options, acceptance, coefficients, fitted figures, sources."""
    return {
        "description": "Calibration of the NPU scenarios (vllm-hust-vspec-sim calibrate-npu): "
                       "fitted acceptance and step-cost coefficients, and every measured "
                       "configuration's throughput as measured and as the calibration "
                       "simulates it (mean over the prediction seeds; 'predicted_recorded': "
                       "with the per-bucket gammas its log shows).",
        "options": {k: v for k, v in asdict(cal.options).items()},
        "acceptance": {m: cal.accept[m].to_json() for m in METHODS},
        "coefficients": {m: {k: round(v, 6) for k, v in sorted(c.items())}
                         for m, c in sorted(cal.coefficients.items())},
        "native_gammas": {k: list(v) for k, v in data.native_gammas.items()},
        "fitted": [
            {"config": p.config, "measured_tok_s": round(p.measured, 2),
             "predicted_tok_s": round(p.predicted, 2),
             "predicted_recorded_tok_s": (round(p.predicted_recorded, 2)
                                          if p.predicted_recorded is not None else None),
             "ratio": round(p.ratio, 4), "steps": round(p.steps, 1)}
            for p in fitted
        ],
        "sources": {k: Path(v).name for k, v in data.sources.items()},
    }


def _json(doc: dict[str, Any]) -> str:
    """Indented JSON with every list of scalars on one line (the length lists stay short)."""
    text = json.dumps(doc, indent=1)
    return re.sub(r"\[\s*([^\[\]{}]*?)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]"
                  if m.group(1).strip() else "[]", text) + "\n"


# The profile ``method`` of each scenario's drafter (vSpec's method names).
PROFILE_METHOD = {"draft": "draft_model", "eagle": "eagle"}


def profile_doc(scenario: dict[str, Any], method: str) -> dict[str, Any]:
    """A schema-v1 profile fitted to a calibrated scenario's steady decode steps (every
    power-of-two batch up to its ``max_num_seqs``, every gamma), carrying its calibrated
    acceptance, with the provenance in ``notes``: derived from measurements, not measured."""
    sc = parse_scenario(scenario, str(scenario["name"]))
    samples = [
        FitSample(batch_size=b, gamma=g, num_batched_tokens=b * (1 + g), context_tokens=0.0,
                  step_s=sc.cost.steady_time(b, g, 0))
        for b in bucket_batches(sc.max_num_seqs)
        for g in range(sc.min_gamma, sc.max_gamma + 1)
    ]
    rates = [float(r) for r in scenario["acceptance"]["rates"]]
    unconditional = [math.prod(rates[: k + 1]) for k in range(len(rates))]
    result = fit_profile(samples, context_terms=False, default_acceptance=unconditional,
                         assumed_context_tokens=0, name=f"{sc.name}-calibrated",
                         method=PROFILE_METHOD[method])
    notes = (f"Derived from measurements, not measured: fitted by vllm-hust-vspec-sim "
             f"calibrate-npu to the steady decode steps of the calibrated scenario {sc.name} "
             f"(batch 1..{sc.max_num_seqs}, gamma {sc.min_gamma}..{sc.max_gamma}; relative "
             f"fit residual {result.relative_residual:.1%}), whose step costs and acceptance "
             f"were fitted to 0.14.3's Ascend runs "
             f"(sim/data/v014_npu, record sim/data/npu_calibration.json). Valid for "
             f"that host: one NPU, Qwen2.5-14B-Instruct, BF16, FULL graphs, batch up to 128.")
    return replace(result.profile, notes=notes).to_dict()


def write_calibration(cal: Calibration, data: Measurements, out_dir: Path,
                      record_path: Path, profiles_dir: Path | None = None
                      ) -> tuple[list[Path], list[Prediction]]:
    """Write both scenarios into ``out_dir``, a profile fitted to each into
    ``profiles_dir`` (default ``out_dir``) and the record to ``record_path``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    prof_dir = profiles_dir or out_dir
    prof_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for method in METHODS:
        doc = scenario_doc(cal, data, method)
        path = out_dir / f"{scenario_name(method)}.json"
        path.write_text(_json(doc), encoding="utf-8")
        written.append(path)
        path = prof_dir / f"{scenario_name(method)}.calibrated-profile.json"
        path.write_text(json.dumps(profile_doc(doc, method), indent=2) + "\n", encoding="utf-8")
        written.append(path)
    fitted = [predict(cal, data, c) for c in data.measured]
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(_json(record_doc(cal, data, fitted)), encoding="utf-8")
    written.append(record_path)
    return written, fitted


def shipped_dir() -> Path:
    """Where the shipped calibrated scenarios live (``sim/scenarios_npu``)."""
    return Path(str(resources.files(DATA_PACKAGE).joinpath(SCENARIO_DIR)))


def shipped_record() -> Path:
    """The shipped calibration record (``sim/data/npu_calibration.json``)."""
    return Path(str(resources.files(DATA_PACKAGE).joinpath("data").joinpath(RECORD_NAME)))


def load_record(path: Path | None = None) -> Calibration:
    """The calibration a record holds (acceptance, coefficients, options)."""
    doc = json.loads((path or shipped_record()).read_text(encoding="utf-8"))
    accept = {m: AcceptParams(tuple(float(r) for r in a["rates"]),
                              a.get("beta_concentration"))
              for m, a in doc["acceptance"].items()}
    o = doc["options"]
    options = FitOptions(
        prefill_per_token_ms=float(o["prefill_per_token_ms"]),
        draft_ingest_per_token_ms=float(o["draft_ingest_per_token_ms"]),
        shared_terms=tuple(o["shared_terms"]),
        drafter_terms={k: tuple(v) for k, v in o["drafter_terms"].items()},
        own_terms={k: tuple(v) for k, v in o["own_terms"].items()},
        borrowed={k: (str(v[0]), str(v[1])) for k, v in o.get("borrowed", {}).items()},
        reward_weight=float(o["reward_weight"]),
        prior_weight=float(o["prior_weight"]),
        fit_seeds=tuple(int(v) for v in o["fit_seeds"]),
        predict_seeds=tuple(int(v) for v in o["predict_seeds"]),
    )
    return Calibration(accept, {m: {k: float(v) for k, v in c.items()}
                                for m, c in doc["coefficients"].items()}, options=options)


def load_npu_scenario(method: str) -> Scenario:
    """A shipped calibrated scenario (``draft`` or ``eagle``)."""
    path = shipped_dir() / f"{scenario_name(method)}.json"
    return parse_scenario(json.loads(path.read_text(encoding="utf-8")), scenario_name(method))
