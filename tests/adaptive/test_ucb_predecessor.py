"""vSpec's UCB1 policy makes 0.14.3's gamma decisions, checked against 0.14.3's own code.

The predecessor (vllm-hust-vspec 0.14.3, a small pure-Python wheel) is installed without
dependencies into a throwaway venv cached under ``.cache/predecessor-0.14.3``; its
``OnlineGammaController`` is driven in a subprocess of that venv through the same serving
runs (``_ucb_replay.py``) as vSpec's :class:`Ucb1Controller`, and every decision must match.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import _ucb_replay
import pytest

from vllm_hust_vspec.adaptive import build_controller
from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.adaptive.ucb import Ucb1Controller, UcbConfig

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".cache" / "predecessor-0.14.3"
DRIVER = Path(_ucb_replay.__file__)
PACKAGE = "vllm-hust-vspec==0.14.3"


def _python() -> Path:
    return VENV / "bin" / "python"


def _ready() -> bool:
    probe = [str(_python()), "-c", "import vllm_hust_vspec.adaptive.online as o; "
             "from vllm_hust_vspec import __version__ as v; assert v == '0.14.3', v"]
    return _python().exists() and subprocess.run(probe, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def predecessor() -> Path:
    """The venv's python with 0.14.3 installed (built once, then reused)."""
    if not _ready():
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        done = subprocess.run([str(_python()), "-m", "pip", "install", "-q", "--no-deps",
                               "--disable-pip-version-check", PACKAGE],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not _ready():
            pytest.skip(f"the package index does not serve {PACKAGE} (pip: "
                        f"{(done.stderr or done.stdout).strip()[-300:]})")
    return _python()


def _cost(**over: Any) -> dict[str, Any]:
    c = {"base_ms": 28.0, "per_token_ms": 0.04, "pass_ms": 3.0, "pass_per_req_ms": 0.06,
         "admit_ms": 60.0, "noise": 0.04}
    c.update(over)
    return c


def _spec(name: str, seed: int, kwargs: dict[str, Any], **over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name, "seed": seed, "steps": 900, "budget": 0, "finish_p": 0.004,
        "refill": 8, "phases": [[500, 128], [650, 40], [760, 12], [840, 3], [900, 1]],
        "acceptance": [0.85, 0.75, 0.6, 0.5, 0.4, 0.35], "cost": _cost(),
        "start_gamma": kwargs.get("initial_gamma") or kwargs["max_gamma"],
        "v014_kwargs": kwargs,
    }
    spec.update(over)
    return spec


def _specs() -> list[dict[str, Any]]:
    """Runs that reach every branch of the rule: anchors and none, gamma 0 in a wide range,
    strides, batch limits, binding budgets, transfers between draining buckets, frontier
    probes both opened (cheap passes, high acceptance) and kept closed."""
    draft = {"min_gamma": 1, "max_gamma": 4, "control_interval": 2, "hysteresis": 0.05,
             "exploration": 0.01, "window_size": 32, "warmup_samples": 1,
             "inflight_warmup_padding": 1, "initial_gamma": 2, "max_gamma_step": 1}
    return [
        _spec("draft-anchor", 1, draft, acceptance=[0.45, 0.25, 0.2]),
        _spec("draft-anchor-cheap", 2, {**draft, "control_interval": 1},
              cost=_cost(pass_ms=0.3, pass_per_req_ms=0.001, per_token_ms=0.01),
              acceptance=[0.995, 0.99, 0.99, 0.99], hard_scale=1.0, steps=700),
        _spec("eagle-incumbent", 3, {**draft, "hysteresis": 0.2, "initial_gamma": None,
                                     "warmup_return": "incumbent", "min_gamma": 1,
                                     "max_gamma": 2}),
        _spec("wide-zero", 4, {"min_gamma": 0, "max_gamma": 5, "control_interval": 4,
                               "hysteresis": 0.05, "exploration": 0.01, "window_size": 4,
                               "warmup_samples": 1}, steps=700,
              cost=_cost(pass_ms=6.0), acceptance=[0.3, 0.2]),
        _spec("no-anchor-ucb", 5, {"min_gamma": 1, "max_gamma": 5, "control_interval": 1,
                                   "hysteresis": 0.03, "exploration": 0.15, "window_size": 8,
                                   "warmup_samples": 4, "max_gamma_step": 2,
                                   "ewma_weight": 0.3}),
        _spec("mtp-stride", 6, {"min_gamma": 2, "max_gamma": 6, "candidate_stride": 2,
                                "control_interval": 4, "hysteresis": 0.05,
                                "exploration": 0.01, "window_size": 16,
                                "warmup_samples": 1, "initial_gamma": 4,
                                "max_gamma_step": 2}),
        _spec("eagle3-limits-budget", 7,
              {"min_gamma": 1, "max_gamma": 5, "control_interval": 2, "hysteresis": 0.05,
               "exploration": 0.01, "window_size": 8, "warmup_samples": 1,
               "initial_gamma": 5, "probe_shared_cost_units": 8.0,
               "max_batched_tokens": 512, "candidate_batch_limits": {"1": 32, "2": 64},
               "inflight_warmup_padding": 1},
              budget=512, phases=[[300, 120], [500, 60], [700, 20], [800, 5]],
              steps=800, cost=_cost(graphs=[5], offgraph_ms=9.0)),
    ]


def _ucb_config(kwargs: dict[str, Any]) -> UcbConfig:
    """0.14.3's constructor keywords in vSpec's names."""
    names = {"window_size": "window", "inflight_warmup_padding": "inflight_padding",
             "candidate_stride": "gamma_stride"}
    cfg: dict[str, Any] = {}
    for k, v in kwargs.items():
        if k == "max_batched_tokens":
            continue  # vSpec reads the token budget at every decision
        if k == "candidate_batch_limits":
            cfg["batch_limits"] = tuple((int(g), int(b)) for g, b in v.items())
            continue
        cfg[names.get(k, k)] = v
    # 0.14.3's constructor defaults where a spec leaves them out
    cfg.setdefault("ewma_weight", 0.1)
    cfg.setdefault("warmup_return", "best")
    cfg.setdefault("max_gamma_step", 1)
    return UcbConfig(**cfg)


def _run_vspec(spec: dict[str, Any]) -> list[int]:
    ctrl = Ucb1Controller(_ucb_config(spec["v014_kwargs"]))

    def feed(batch: int, verified: int, decided: int, ids: list[str], acc: list[int],
             ms: float, admitted: bool) -> None:
        if not ids:
            return  # the host reports no feedback for a step without decoding requests
        ctrl.observe(StepFeedback(
            batch_size=len(ids), gamma=verified, drafted=(verified,) * len(ids),
            accepted=tuple(acc), committed=sum(acc) + len(acc), interval_s=ms / 1000.0,
            token_budget=spec["budget"], steady=not admitted, next_gamma=decided,
            request_ids=tuple(ids)))

    return _ucb_replay.run(spec, ctrl.decide, feed)


@pytest.mark.build
def test_decisions_match_the_predecessor(predecessor: Path, tmp_path: Path) -> None:
    specs = _specs()
    path = tmp_path / "specs.json"
    path.write_text(json.dumps(specs), encoding="utf-8")
    done = subprocess.run([str(predecessor), str(DRIVER), str(path)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    for spec, want in zip(specs, theirs, strict=True):
        ours = _run_vspec(spec)
        first = next((i for i, (a, b) in enumerate(zip(ours, want, strict=False)) if a != b),
                     None)
        assert ours == want, (f"{spec['name']}: first difference at step {first}: "
                              f"vSpec {ours[first - 3:first + 3] if first else ours[-3:]} vs "
                              f"0.14.3 {want[first - 3:first + 3] if first else want[-3:]}")
        # the run is not degenerate: the rule moved between arms
        assert len(set(want)) > 1, spec["name"]


def test_factory_builds_ucb1_with_the_predecessor_defaults() -> None:
    ctrl = build_controller("online", min_gamma=1, max_gamma=4, algorithm="ucb1")
    assert isinstance(ctrl, Ucb1Controller)
    cfg = ctrl.config
    assert (cfg.control_interval, cfg.hysteresis, cfg.exploration, cfg.window,
            cfg.warmup_samples, cfg.max_gamma_step) == (4, 0.05, 0.01, 32, 1, 1)
    tuned = build_controller("online", min_gamma=0, max_gamma=4, algorithm="ucb1",
                             window=8, exploration=0.2, warmup_samples=3, hysteresis=0.1,
                             control_interval=2, warmup_return="incumbent")
    assert isinstance(tuned, Ucb1Controller)
    assert (tuned.config.window, tuned.config.exploration, tuned.config.warmup_return) == (
        8, 0.2, "incumbent")
    with pytest.raises(ValueError, match="algorithm"):
        build_controller("online", min_gamma=0, max_gamma=4, algorithm="ucb2")


def test_budget_and_stride_bound_every_decision() -> None:
    ctrl = Ucb1Controller(UcbConfig(min_gamma=0, max_gamma=6, gamma_stride=2, max_gamma_step=2,
                                    control_interval=1, window=2))
    for step in range(300):
        batch = 1 + step % 40
        g = ctrl.decide(batch, 96)
        assert g % 2 == 0 and batch * (g + 1) <= 96 or g == 0
        ctrl.observe(StepFeedback(batch_size=batch, gamma=g, drafted=(g,) * batch,
                                  accepted=(min(g, 1),) * batch,
                                  committed=batch * (1 + min(g, 1)),
                                  interval_s=0.01 + 0.001 * g, token_budget=96,
                                  next_gamma=g))


def test_unknown_config_values_name_the_field() -> None:
    with pytest.raises(ValueError, match="initial_gamma"):
        UcbConfig(min_gamma=2, max_gamma=6, gamma_stride=2, max_gamma_step=2, initial_gamma=3)
    with pytest.raises(ValueError, match="warmup_return"):
        UcbConfig(warmup_return="last")
    assert sys.modules["vllm_hust_vspec.adaptive.ucb"]  # imported without vllm or torch
