"""vllm-hust-vSpec 0.14.3's measured Ascend runs, as the calibration reads them.

Inputs (defaults: the copies shipped in ``sim/data/``, see docs/simulator.md):

* ``runs.jsonl`` -- one object per run (``path``, ``elapsed_s``, ``output_tokens``, the
  controller summary ``ucb_summary`` with ``selection_counts`` and
  ``second_token_transition_counts``);
* ``bucket_rewards.jsonl`` -- the controller's mean reward per (batch bucket, gamma) of a run's
  ``.log`` (committed tokens per ms of completion interval over the arm's last 32 steady steps);
* ``hosts.json`` -- per configuration what the two files do not carry (host path, refill,
  token budget, graph capture sizes, the per-bucket gammas the online run played, summary
  figures read from a log), each with its source file;
* the lengths file -- per-request prompt lengths and every run's output lengths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .._strict import ScenarioError

DATA_PACKAGE = "vllm_hust_vspec.sim"


@dataclass(frozen=True, slots=True)
class MeasuredReward:
    """The controller's mean reward of one (bucket, gamma) arm, tokens per millisecond."""

    bucket: int
    gamma: int
    observations: int
    per_ms: float


@dataclass(frozen=True, slots=True)
class AcceptStats:
    """Acceptance figures of a run's controller summary: steps (decisions) and the
    cumulative second-draft transition counts ``[[rej->rej, rej->acc], [acc->rej, acc->acc]]``
    (whether a request's second draft token was accepted, consecutive steps)."""

    steps: int
    transitions: tuple[tuple[int, int], tuple[int, int]] | None

    @property
    def p_second(self) -> float | None:
        """P(second draft accepted) over all counted step pairs."""
        if self.transitions is None:
            return None
        (rr, ra), (ar, aa) = self.transitions
        total = rr + ra + ar + aa
        return (ra + aa) / total if total else None

    @property
    def after_accept(self) -> float | None:
        """P(second accepted | it was accepted at the request's previous step)."""
        if self.transitions is None:
            return None
        ar, aa = self.transitions[1]
        return aa / (ar + aa) if ar + aa else None

    @property
    def after_reject(self) -> float | None:
        """P(second accepted | it was rejected at the request's previous step)."""
        if self.transitions is None:
            return None
        rr, ra = self.transitions[0]
        return ra / (rr + ra) if rr + ra else None


@dataclass(frozen=True, slots=True)
class MeasuredConfig:
    """One measured configuration and the host it ran on."""

    name: str
    method: str  # "target", "draft" or "eagle"
    policy: str  # "fixed:K", "pred-ucb", "pred-ucb-eagle"
    host: str  # "plain" (vLLM alone) or "adaptive" (0.14.3's runtime)
    refill: int
    max_num_batched_tokens: int
    capture_sizes: tuple[int, ...]
    min_gamma: int
    max_gamma: int
    run: str  # the runs.jsonl path of the run
    elapsed_s: float
    output_tokens: int
    output_lengths: tuple[int, ...]
    schedule: tuple[tuple[int, int], ...] = ()  # (bucket, gamma) the online run played
    rewards: tuple[MeasuredReward, ...] = ()
    accept: AcceptStats | None = None
    acceptance_only: bool = False  # another stack: only its acceptance figures are used

    @property
    def throughput(self) -> float:
        """Measured output tokens per second."""
        return self.output_tokens / self.elapsed_s


@dataclass(frozen=True, slots=True)
class StepPrior:
    """A measured step-time breakdown used as a soft constraint: ``ms`` is the sum of the
    named cost terms of ``method`` for a decode step at ``batch`` and ``gamma``."""

    name: str
    method: str
    batch: int
    gamma: int
    ms: float
    terms: tuple[str, ...]
    source: str


@dataclass(frozen=True, slots=True)
class Measurements:
    """Everything the calibration reads."""

    configs: tuple[MeasuredConfig, ...]
    prompt_lengths: tuple[int, ...]
    native_gammas: dict[str, tuple[int, ...]]
    sources: dict[str, str]
    priors: tuple[StepPrior, ...] = ()

    @property
    def measured(self) -> tuple[MeasuredConfig, ...]:
        """The configurations whose throughput the calibration fits and predicts."""
        return tuple(c for c in self.configs if not c.acceptance_only)

    def get(self, name: str) -> MeasuredConfig:
        """The configuration called ``name``."""
        for c in self.configs:
            if c.name == name:
                return c
        raise KeyError(name)

    def method_configs(self, method: str) -> tuple[MeasuredConfig, ...]:
        """Target-only plus the measured configurations of ``method`` ("draft", "eagle")."""
        return tuple(c for c in self.measured if c.method in ("target", method))


def default_path(name: str) -> Path:
    """A file shipped in ``sim/data`` (``name`` relative to it)."""
    return Path(str(resources.files(DATA_PACKAGE).joinpath("data").joinpath(name)))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read ({exc})") from None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ScenarioError(f"{path}:{n}: expected a JSON object")
        rows.append(row)
    return rows


def _counts(obj: Any) -> tuple[tuple[int, int], tuple[int, int]] | None:
    if not (isinstance(obj, list) and len(obj) == 2
            and all(isinstance(r, list) and len(r) == 2 for r in obj)):
        return None
    return ((int(obj[0][0]), int(obj[0][1])), (int(obj[1][0]), int(obj[1][1])))


def _accept_stats(row: dict[str, Any], host: dict[str, Any]) -> AcceptStats | None:
    summary = row.get("ucb_summary") or {}
    counts = host.get("selection_counts") or summary.get("selection_counts") \
        or row.get("selection_counts")
    if not counts:
        return None
    transitions = _counts(host.get("second_token_transition_counts")
                          or summary.get("second_token_transition_counts"))
    return AcceptStats(steps=sum(int(v) for v in counts.values()), transitions=transitions)


def _rewards(run_path: str, rows: list[dict[str, Any]],
             host: dict[str, Any]) -> tuple[MeasuredReward, ...]:
    log = run_path[: -len(".json")] + ".log" if run_path.endswith(".json") else run_path
    out = [MeasuredReward(int(r["batch_bucket"]), int(r["gamma"]), int(r["observations"]),
                          float(r["mean_reward"]))
           for r in rows if r.get("path") == log]
    for item in host.get("bucket_rewards", []):
        out.append(MeasuredReward(int(item[0]), int(item[1]), int(item[2]), float(item[3])))
    return tuple(sorted(out, key=lambda m: (m.bucket, m.gamma)))


def load_measurements(runs: Path | None = None, bucket_rewards: Path | None = None,
                      hosts: Path | None = None, lengths: Path | None = None) -> Measurements:
    """Read the four inputs (None: the shipped copies) into :class:`Measurements`."""
    runs = runs or default_path("v014_npu/runs.jsonl")
    bucket_rewards = bucket_rewards or default_path("v014_npu/bucket_rewards.jsonl")
    hosts = hosts or default_path("v014_npu/hosts.json")
    lengths = lengths or default_path("gsm8k_b128_qwen25_lengths.json")
    run_rows = {str(r.get("path")): r for r in _read_jsonl(runs)}
    reward_rows = _read_jsonl(bucket_rewards)
    host_doc = _read_json(hosts)
    length_doc = _read_json(lengths)
    outputs = length_doc["output_lengths"]
    configs: list[MeasuredConfig] = []
    for name, h in host_doc["configurations"].items():
        row = run_rows.get(h["run"])
        if row is None:
            raise ScenarioError(f"{runs}: no run with path {h['run']!r} (needed by {hosts}: "
                                f"configuration {name!r})")
        if name not in outputs:
            raise ScenarioError(f"{lengths}: no output lengths for {name!r}")
        out_lens = tuple(int(v) for v in outputs[name]["values"])
        if sum(out_lens) != int(row["output_tokens"]):
            raise ScenarioError(f"{lengths}: output lengths of {name!r} sum to {sum(out_lens)}, "
                                f"the run reports {row['output_tokens']} output tokens")
        gamma = int(h["policy"].split(":")[1]) if h["policy"].startswith("fixed:") else 0
        configs.append(MeasuredConfig(
            name=name, method=h["method"], policy=h["policy"], host=h["host"],
            refill=int(h["refill"]), max_num_batched_tokens=int(h["max_num_batched_tokens"]),
            capture_sizes=tuple(int(v) for v in h["capture_sizes"]),
            min_gamma=int(h.get("min_gamma", gamma)), max_gamma=int(h.get("max_gamma", gamma)),
            run=h["run"], elapsed_s=float(row["elapsed_s"]),
            output_tokens=int(row["output_tokens"]), output_lengths=out_lens,
            schedule=tuple(sorted((int(k), int(v)) for k, v in h.get("schedule", {}).items())),
            rewards=_rewards(h["run"], reward_rows, h), accept=_accept_stats(row, h),
            acceptance_only=bool(h.get("acceptance_only", False)),
        ))
    natives = {k: tuple(int(x) for x in v) for k, v in host_doc["native_gammas"].items()
               if isinstance(v, list)}
    priors = tuple(
        StepPrior(name=k, method=v["method"], batch=int(v["batch"]), gamma=int(v["gamma"]),
                  ms=float(v["ms"]), terms=tuple(v["terms"]), source=v["source"])
        for k, v in host_doc.get("priors", {}).items())
    return Measurements(
        configs=tuple(configs),
        prompt_lengths=tuple(int(v) for v in length_doc["prompt_lengths"]["values"]),
        native_gammas=natives,
        sources={"runs": str(runs), "bucket_rewards": str(bucket_rewards),
                 "hosts": str(hosts), "lengths": str(lengths)},
        priors=priors,
    )
