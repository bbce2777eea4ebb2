"""The vllm-hust-vspec 0.14 profiles (milliseconds) load as they are, converted exactly.

The six profiles that release shipped are written here from their recorded values; each is
loaded through ``load_profile`` (what ``--adaptive-profile`` and the profile policy read) and
its step times are compared with the 0.14 latency formula evaluated directly.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from vllm_hust_vspec.adaptive import (
    Profile,
    ProfileConfig,
    ProfileError,
    ProfilePolicy,
    StepFeedback,
    build_controller,
    load_profile,
)
from vllm_hust_vspec.cli import launch

_PLACEHOLDER = {
    "target": {"alpha_ms_per_context_token": 0.0, "gamma_ms_per_batched_token": 0.0,
               "delta_ms": 100.0},
    "draft": {"alpha_ms_per_context_token": 0.0, "gamma_ms_per_batched_token": 0.0,
              "delta_ms": 20.0},
}


def _shipped(max_k: int, initial: int, rate: float, policy: dict[str, int] | None
             ) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema_version": 1, "max_speculative_tokens": max_k,
                           "initial_gamma": initial, "default_acceptance_rate": rate,
                           **json.loads(json.dumps(_PLACEHOLDER))}
    if policy is not None:
        doc["batch_gamma_policy"] = policy
    return doc


# The six profiles of the 0.14.3 release (profiles/*.json), key for key.
SHIPPED: dict[str, dict[str, Any]] = {
    "qwen25_draft_gamma0_sync_transition.json": _shipped(2, 0, 0.77, {"1": 2, "2": 0}),
    "qwen25_draft_gsm8k_graph_b128_g4.json": _shipped(4, 3, 0.77, {"64": 4, "128": 3}),
    "qwen25_draft_gsm8k_graph_g3_control.json": _shipped(3, 3, 0.77, None),
    "qwen25_draft_target_only_control.json": _shipped(4, 0, 0.77, {"128": 0}),
    "qwen25_eagle_gsm8k_graph_b128.json": _shipped(2, 2, 0.85, {"1": 1, "128": 2}),
    "qwen25_eagle_gsm8k_graph_g2_control.json": _shipped(2, 2, 0.85, None),
}

# Profiles that use every term of the 0.14 model (the shipped ones are placeholders).
FULL_SERIAL: dict[str, Any] = {
    "schema_version": 1,
    "max_speculative_tokens": 5,
    "default_acceptance_rate": 0.6,
    "target": {"alpha_ms_per_context_token": 0.0003, "gamma_ms_per_batched_token": 0.041,
               "delta_ms": 8.5},
    "draft": {"alpha_ms_per_context_token": 0.00007, "gamma_ms_per_batched_token": 0.006,
              "delta_ms": 1.25},
    "per_gamma_overhead_ms": {"0": 0.05, "2": 0.4, "3": 0.75},
    "batch_gamma_policy": {"16": 4, "4": 5, "96": 1},
}
FULL_PARALLEL: dict[str, Any] = {
    **FULL_SERIAL,
    "draft_parallel": True,
    "per_gamma_overhead_ms": {"5": 1.5, "1": 0.2},
}

POINTS = [(1, 0), (1, 700), (7, 3000), (64, 40960), (128, 262144), (300, 5)]


def _forward_ms(part: dict[str, float], context: int, batched: int) -> float:
    return (part.get("alpha_ms_per_context_token", 0.0) * context
            + part.get("gamma_ms_per_batched_token", 0.0) * batched + part.get("delta_ms", 0.0))


def step_ms(doc: dict[str, Any], k: int, batch: int, context: int) -> float:
    """The 0.14 step latency (ms) at gamma k, written out from its definition."""
    if k == 0:
        draft = 0.0
    elif doc.get("draft_parallel", False):
        draft = _forward_ms(doc["draft"], context, batch * (k + 1))
    else:
        draft = sum(_forward_ms(doc["draft"], context + i * batch, batch) for i in range(k))
    target = _forward_ms(doc["target"], context, batch * (k + 1))
    overhead = {int(g): ms for g, ms in doc.get("per_gamma_overhead_ms", {}).items()}
    return draft + target + overhead.get(k, 0.0)


def preferred_gamma(doc: dict[str, Any], batch: int) -> int | None:
    """The 0.14 bucket lookup: the first upper bound >= batch, else the largest bucket."""
    buckets = sorted((int(b), g) for b, g in doc.get("batch_gamma_policy", {}).items())
    for bound, gamma in buckets:
        if batch <= bound:
            return gamma
    return buckets[-1][1] if buckets else None


def _write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


ALL = {**SHIPPED, "full_serial.json": FULL_SERIAL, "full_parallel.json": FULL_PARALLEL}


@pytest.mark.parametrize("name", sorted(ALL))
def test_step_times_equal_the_014_formula(tmp_path: Path, name: str) -> None:
    doc = ALL[name]
    prof = load_profile(_write(tmp_path, name, doc))
    for k in range(doc["max_speculative_tokens"] + 1):
        for batch, context in POINTS:
            expected_s = step_ms(doc, k, batch, context) / 1000.0
            assert prof.step_time(batch, k, context) == pytest.approx(expected_s, rel=1e-12), \
                (k, batch, context)


@pytest.mark.parametrize("name", sorted(ALL))
def test_acceptance_initial_gamma_and_round_trip(tmp_path: Path, name: str) -> None:
    doc = ALL[name]
    prof = load_profile(_write(tmp_path, name, doc))
    rate = doc["default_acceptance_rate"]
    # A conditional rate per position: P(positions 0..k all accepted) = rate ** (k + 1).
    assert prof.acceptance(4) == pytest.approx(tuple(rate ** (k + 1) for k in range(4)))
    assert prof.initial_gamma == doc.get("initial_gamma", doc["max_speculative_tokens"])
    assert Profile.from_dict(json.loads(json.dumps(prof.to_dict()))) == prof


@pytest.mark.parametrize("name", sorted(ALL))
def test_batch_gamma_policy_buckets(tmp_path: Path, name: str) -> None:
    doc = ALL[name]
    prof = load_profile(_write(tmp_path, name, doc))
    for batch in range(1, 400):
        assert prof.table_gamma(batch) == preferred_gamma(doc, batch), batch
    if "batch_gamma_policy" in doc:
        assert prof.batch_gamma_table_mode == "preferred"


def _run(pol: ProfilePolicy, batch: int, steps: int) -> list[int]:
    """Decide and feed back steady steps whose drafts are all accepted."""
    out = []
    for _ in range(steps):
        g = pol.decide(batch, 1 << 20)
        pol.observe(StepFeedback(batch_size=batch, gamma=g, drafted=(g,) * batch,
                                 accepted=(g,) * batch, committed=batch * (1 + g),
                                 interval_s=0.1 + 0.02 * g, token_budget=1 << 20))
        out.append(g)
    return out


@pytest.mark.parametrize("name", sorted(n for n in ALL if "batch_gamma_policy" in ALL[n]))
def test_the_profile_policy_follows_the_buckets(tmp_path: Path, name: str) -> None:
    doc = ALL[name]
    path = _write(tmp_path, name, doc)
    bounds = sorted(int(b) for b in doc["batch_gamma_policy"])
    for batch in {1, *bounds, *(b + 1 for b in bounds), 2 * bounds[-1]}:
        # A hysteresis the model can never beat: the bucket's gamma, before and after the
        # warm-up (table_steps), as the 0.14 batch_gamma_policy.
        pol = build_controller("profile", min_gamma=0, max_gamma=doc["max_speculative_tokens"],
                               profile_path=str(path), hysteresis=10.0, max_gamma_step=8,
                               table_steps=4, probe_interval=0)
        assert isinstance(pol, ProfilePolicy)
        assert pol.gamma == doc.get("initial_gamma", doc["max_speculative_tokens"])
        decisions = _run(pol, batch, 20)
        assert set(decisions) == {preferred_gamma(doc, batch)}, (batch, decisions)
        assert pol.snapshot()["source"] == "table"


def test_a_clearly_better_arm_overrides_the_bucket(tmp_path: Path) -> None:
    """As in 0.14: after the warm-up the model may leave the bucket's gamma, by the margin."""
    name = "qwen25_draft_target_only_control.json"
    prof = load_profile(_write(tmp_path, name, SHIPPED[name]))
    pol = ProfilePolicy(prof, ProfileConfig(max_gamma=4, table_steps=4, hysteresis=0.03))
    decisions = _run(pol, 128, 30)
    assert decisions[:4] == [0, 0, 0, 0]  # starts at initial_gamma 0, the bucket's gamma
    assert decisions[-1] > 0 and pol.snapshot()["source"] == "model"


def test_the_worked_goodput_example(tmp_path: Path) -> None:
    """0.14's worked example: b128_g4 at batch 128, acceptance 0.77, tokens per ms."""
    name = "qwen25_draft_gsm8k_graph_b128_g4.json"
    pol = ProfilePolicy(load_profile(_write(tmp_path, name, SHIPPED[name])),
                        ProfileConfig(max_gamma=4))
    per_ms = [g / 1000.0 for g in pol.predicted_goodput(128)]
    doc = SHIPPED[name]
    expected = [128 * sum(0.77 ** j for j in range(k + 1)) / step_ms(doc, k, 128, 0)
                for k in range(5)]
    assert per_ms == pytest.approx(expected, rel=1e-9)
    assert per_ms == pytest.approx([1.280, 1.888, 2.160, 2.2555, 2.2549], abs=5e-4)
    assert max(range(5), key=per_ms.__getitem__) == 3  # the bucket's gamma at batch 128


def test_the_format_is_told_by_its_keys_not_the_name(tmp_path: Path) -> None:
    doc = SHIPPED["qwen25_eagle_gsm8k_graph_b128.json"]
    plain = load_profile(_write(tmp_path, "profile.json", doc))
    assert plain == load_profile(_write(tmp_path, "qwen25_eagle_gsm8k_graph_b128.json", doc))
    # Only a millisecond key in target (or draft) marks the 0.14 format.
    only_delta = {"max_speculative_tokens": 2, "target": {"delta_ms": 10.0},
                  "draft": {"delta_ms": 1.0}}
    assert load_profile(_write(tmp_path, "x.json", only_delta)).step_time(4, 2) == \
        pytest.approx((10.0 + 2 * 1.0) / 1000.0)


def test_ignored_key_is_named_in_a_deprecation_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="vllm_hust_vspec.adaptive.profile_v014"):
        load_profile(_write(tmp_path, "p.json", SHIPPED["qwen25_eagle_gsm8k_graph_b128.json"]))
    text = caplog.text
    assert "max_speculative_tokens" in text and "deprecated" in text and "p.json" in text


@pytest.mark.parametrize(("edit", "key"), [
    (lambda d: d.update(max_gamma=3), "max_gamma"),
    (lambda d: d["target"].update(alpha_ms_per_ctx_token=1.0), "target.alpha_ms_per_ctx_token"),
    (lambda d: d["draft"].update(constant_s=0.001), "draft.constant_s"),
    (lambda d: d.pop("max_speculative_tokens"), "max_speculative_tokens"),
    (lambda d: d.update(default_acceptance_rate=1.5), "default_acceptance_rate"),
    (lambda d: d.update(initial_gamma=3), "initial_gamma"),
    (lambda d: d.update(draft_parallel=1), "draft_parallel"),
    (lambda d: d.update(per_gamma_overhead_ms={"3": 1.0}), "per_gamma_overhead_ms.3"),
    (lambda d: d.update(per_gamma_overhead_ms={"x": 1.0}), "per_gamma_overhead_ms.x"),
    (lambda d: d.update(batch_gamma_policy={"8": 3}), "batch_gamma_policy.8"),
    (lambda d: d.update(batch_gamma_policy={"0": 1}), "batch_gamma_policy.0"),
    (lambda d: d.update(target={"delta_ms": 0.0}), "target.delta_ms"),
    (lambda d: d.update(schema_version=2), "schema_version"),
])
def test_a_bad_key_is_reported_by_name(tmp_path: Path, edit: Any, key: str) -> None:
    doc = json.loads(json.dumps(SHIPPED["qwen25_eagle_gsm8k_graph_b128.json"]))
    edit(doc)
    path = _write(tmp_path, "bad.json", doc)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(path) in str(info.value) and f"'{key}'" in str(info.value), info.value


def test_schema_v1_still_rejects_unknown_keys(tmp_path: Path) -> None:
    doc = {"schema_version": 1, "target": {"constant_s": 0.01}, "draft": {"constant_s": 0.001},
           "batch_gamma_policy": {"8": 1}}
    path = _write(tmp_path, "v1.json", doc)
    with pytest.raises(ProfileError, match=r"v1\.json.*'batch_gamma_policy'"):
        load_profile(path)


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    for key in list(__import__("os").environ):
        if key.startswith(("HUST_VSPEC_", "VSPEC_")):
            monkeypatch.delenv(key)
    out = []
    for name in ("target", "draft"):
        folder = tmp_path / "models" / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        out.append(folder)
    return out[0], out[1]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_launcher_dry_run_accepts_them(
    tmp_path: Path, models: tuple[Path, Path], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, name, SHIPPED[name])
    target, draft = models
    code = launch.main(["--method", "draft", "--target-model", str(target), "--draft-model",
                        str(draft), "--adaptive-profile", str(path), "--dry-run", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["env"]["HUST_VSPEC_ENABLED"] == "1"
