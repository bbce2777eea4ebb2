"""Serving runs replayed into a UCB1 gamma controller, for the decision-identity test.

Imports nothing of vSpec: ``python _ucb_replay.py SPEC.json`` runs in a venv holding
vllm-hust-vSpec 0.14.3 and drives its own ``OnlineGammaController``; the test imports
:func:`run` and drives vSpec's :class:`Ucb1Controller` through the same runs.

A run is a deterministic function of its spec and of the gammas the controller picks: each
step's batch (requests finish and are admitted by seeded draws), every request's accepted
drafts (seeded by step and request), and the step's interval (a cost shape of verified width
and drafter passes, with seeded noise, in whole 1/64 ms so milliseconds and seconds convert
exactly). A step that admits requests, or whose verified gamma differs from the one drafted
after it, teaches only acceptance.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from typing import Any

# decide(batch, budget) -> gamma;
# feed(batch, verified, decided, ids, accepted, latency_ms, admitted) -> None
Decide = Callable[[int, int], int]
Feed = Callable[[int, int, int, list[str], list[int], float, bool], None]


def _latency(spec: dict[str, Any], t: int, batch: int, verified: int, decided: int,
             admitted: int) -> float:
    """Step milliseconds: base + per verified token + per drafter pass (+ admission)."""
    c = spec["cost"]
    width = batch * (verified + 1)
    off = c.get("offgraph_ms", 0.0) if decided not in c.get("graphs", [decided]) else 0.0
    ms = (c["base_ms"] + c["per_token_ms"] * width + c["pass_ms"] * decided
          + c["pass_per_req_ms"] * batch * decided + off + c["admit_ms"] * (admitted > 0))
    ms *= 1.0 + random.Random(f"{spec['seed']}/lat/{t}").gauss(0.0, c["noise"])
    q = max(1, round(ms * 64)) / 64.0
    while (q / 1000.0) * 1000.0 != q:  # exact ms <-> s round trip
        q += 1 / 64.0
    return q


def _accepted(spec: dict[str, Any], t: int, rid: str, drafted: int) -> int:
    rates = spec["acceptance"]
    rng = random.Random(f"{spec['seed']}/acc/{t}/{rid}")
    easy = random.Random(f"{spec['seed']}/req/{rid}").random() < spec.get("easy_share", 0.5)
    n = 0
    for k in range(drafted):
        p = rates[min(k, len(rates) - 1)] * (1.0 if easy else spec.get("hard_scale", 0.8))
        if rng.random() >= p:
            break
        n += 1
    return n


def _target_batch(spec: dict[str, Any], t: int) -> int:
    """The batch the run refills to at step ``t`` (piecewise: the spec's phases)."""
    for until, batch in spec["phases"]:
        if t < until:
            return int(batch)
    return 0


def run(spec: dict[str, Any], decide: Decide, feed: Feed) -> list[int]:
    """Drive one run; returns the decided gamma of every step."""
    rng = random.Random(f"{spec['seed']}/batch")
    running: list[str] = []
    next_id = 0
    prev = spec["start_gamma"]
    decisions: list[int] = []
    for t in range(spec["steps"]):
        running = [r for r in running if rng.random() >= spec["finish_p"]]
        target = _target_batch(spec, t)
        admitted: list[str] = []
        want = target - len(running)
        if want >= spec.get("refill", 1) or (want > 0 and not running):
            admitted = [f"r{next_id + i}" for i in range(want)]
            next_id += want
        decoders = running  # admitted last step: prefilled and drafted, so verifying now
        running = running + admitted
        if not running:
            break
        g = decide(len(running), spec["budget"])
        decisions.append(g)
        acc = [_accepted(spec, t, r, prev) for r in decoders]
        ms = _latency(spec, t, len(running), prev, g, len(admitted))
        feed(len(running), prev, g, decoders, acc, ms, bool(admitted))
        prev = g
    return decisions


def run_v014(spec: dict[str, Any]) -> list[int]:
    """Drive vllm-hust-vSpec 0.14.3's OnlineGammaController as its runtime did."""
    from vllm_hust_vspec.adaptive.online import OnlineGammaController  # the 0.14.3 wheel

    kwargs = dict(spec["v014_kwargs"])
    if "candidate_batch_limits" in kwargs:  # JSON object keys are strings
        kwargs["candidate_batch_limits"] = {
            int(g): int(b) for g, b in kwargs["candidate_batch_limits"].items()}
    ctrl = OnlineGammaController(**kwargs)

    def decide(batch: int, budget: int) -> int:
        return int(ctrl.choose(batch, 0).gamma)

    def feed(batch: int, verified: int, decided: int, ids: list[str], acc: list[int],
             ms: float, admitted: bool) -> None:
        ctrl.begin_step_feedback()
        for rid, a in zip(ids, acc, strict=True):
            ctrl.observe(verified, a, request_id=rid)
        if not admitted and verified == decided:
            ctrl.complete_step(gamma=decided, batch_size=batch, context_tokens=0,
                               latency_ms=ms)
        else:
            ctrl.discard_step_feedback()

    return run(spec, decide, feed)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        specs = json.load(fh)
    json.dump([run_v014(s) for s in specs], sys.stdout)
