"""Step costs persisted across restarts (``adaptive_state_path``): a warm cold start.

What a step costs at (batch, gamma, drafter on/off) is a property of the hardware, the models
and the engine's batch settings, not of the workload, so a restarted server can start from
the previous run's step times instead of exploring them again. The hook feeds every steady,
non-transition step to :class:`CostState`; it keeps a discounted mean per (batch, gamma,
drafter_ran) and writes them atomically (a temporary file in the same folder, then
``os.replace``) every ``SAVE_EVERY`` observed steps and at shutdown, so a crash loses at most
those steps and never leaves a half-written file. At start-up the file is used only when its
fingerprint (host, models, dtype, parallelism, batch and graph settings, the maximum gamma)
equals this engine's; otherwise the controller starts without a prior and the log names the
fields that differ. Acceptance is not persisted: it depends on the requests, not the engine.

The file format is adaptive/cost_state_file.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from vllm_hust_vspec.adaptive.cost_prior import CostPrior, CostSample
from vllm_hust_vspec.adaptive.cost_state_file import read_state, state_payload
from vllm_hust_vspec.adaptive.feedback import StepFeedback

logger = logging.getLogger("vllm_hust_vspec.host")

SAVE_EVERY = 512  # observed steps between saves
# Discount per sample of one key's mean: it follows the last ~64 steps of that key, so a
# state saved under a briefly loaded machine is soon replaced by what the engine sees now.
_DISCOUNT = 63.0 / 64.0
_MAX_COUNT = 64  # effective samples a persisted mean stands for, at most


def fingerprint_of(vllm_config: Any, max_gamma: int) -> dict[str, str]:
    """What step costs depend on, read from the engine's config (strings, for a plain diff)."""

    def get(obj: Any, *names: str) -> str:
        for name in names:
            obj = getattr(obj, name, None)
            if obj is None:
                return ""
        return str(obj)

    import torch
    import vllm

    try:
        from vllm.platforms import current_platform

        device = str(current_platform.get_device_name())
    except Exception:  # noqa: BLE001 - a platform without a device name still fingerprints
        device = ""
    spec = vllm_config.speculative_config
    return {
        "vllm": str(getattr(vllm, "__version__", "")),
        "torch": str(torch.__version__),
        "device": device,
        "device_type": get(vllm_config, "device_config", "device_type"),
        "model": get(vllm_config, "model_config", "model"),
        "dtype": get(vllm_config, "model_config", "dtype"),
        "quantization": get(vllm_config, "model_config", "quantization"),
        "method": get(spec, "method"),
        "draft_model": get(spec, "model"),
        "max_gamma": str(max_gamma),
        "tensor_parallel_size": get(vllm_config, "parallel_config", "tensor_parallel_size"),
        "pipeline_parallel_size": get(vllm_config, "parallel_config", "pipeline_parallel_size"),
        "max_num_seqs": get(vllm_config, "scheduler_config", "max_num_seqs"),
        "max_num_batched_tokens": get(vllm_config, "scheduler_config",
                                      "max_num_batched_tokens"),
        "kv_cache_dtype": get(vllm_config, "cache_config", "cache_dtype"),
        "block_size": get(vllm_config, "cache_config", "block_size"),
        "enforce_eager": get(vllm_config, "model_config", "enforce_eager"),
        "cudagraph_mode": get(vllm_config, "compilation_config", "cudagraph_mode"),
    }


class CostState:
    """Discounted mean step time per (batch, gamma, drafter_ran), saved to ``path``."""

    def __init__(self, path: str, fingerprint: dict[str, str]) -> None:
        self.path = Path(os.path.expanduser(path))
        self.fingerprint = dict(fingerprint)
        self._sums: dict[tuple[int, int, bool], list[float]] = {}  # key -> [weight, sum]
        self._since_save = 0
        self.saves = 0

    def load(self) -> CostPrior | None:
        """The previous run's step times when its fingerprint matches this engine's."""
        found = read_state(self.path)
        if found is None:
            logger.info("vSpec: no cost state at %s yet; the controller starts without a "
                        "prior (the state is written as the engine runs)", self.path)
            return None
        fingerprint, prior = found
        differ = sorted(k for k in set(fingerprint) | set(self.fingerprint)
                        if fingerprint.get(k) != self.fingerprint.get(k))
        if differ:
            logger.warning(
                "vSpec: cost state %s was saved by another engine configuration (differs in: "
                "%s); not used, the controller starts without a prior and the file will be "
                "replaced", self.path,
                ", ".join(f"{k} {fingerprint.get(k)!r} -> {self.fingerprint.get(k)!r}"
                          for k in differ))
            return None
        for s in prior.samples:  # carry the old means on, at their weight
            self._sums[(s.batch, s.gamma, s.drafter_ran)] = [float(s.count),
                                                             s.seconds * s.count]
        logger.info("vSpec: controller cost prior from %s (%d step-time means)", self.path,
                    len(prior.samples))
        return prior

    def observe(self, feedback: StepFeedback) -> None:
        """Add one step (steady, one arm only: prefill or gamma-changing steps mix costs)."""
        if not feedback.steady or feedback.interval_s <= 0 or not math.isfinite(
                feedback.interval_s):
            return
        if feedback.next_gamma is not None and feedback.next_gamma != feedback.gamma:
            return
        key = (feedback.batch_size, feedback.gamma, feedback.drafter_ran)
        acc = self._sums.get(key)
        if acc is None:
            self._sums[key] = [1.0, feedback.interval_s]
        else:
            acc[0] = acc[0] * _DISCOUNT + 1.0
            acc[1] = acc[1] * _DISCOUNT + feedback.interval_s
        self._since_save += 1
        if self._since_save >= SAVE_EVERY:
            self.save()

    def samples(self) -> tuple[CostSample, ...]:
        """The current means, as cost samples."""
        out = []
        for (batch, gamma, ran), (weight, total) in sorted(self._sums.items()):
            out.append(CostSample(batch=batch, gamma=gamma, seconds=total / weight,
                                  drafter_ran=ran, count=max(1, min(_MAX_COUNT,
                                                                    round(weight)))))
        return tuple(out)

    def save(self) -> None:
        """Write the state atomically; a failure is logged, never raised into the engine."""
        self._since_save = 0
        if not self._sums:
            return
        payload = state_payload(self.fingerprint, self.samples(), time.time())
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, indent=1)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            tmp = None
            self.saves += 1
        except OSError as exc:
            logger.warning("vSpec: could not save the cost state to %s: %s", self.path, exc)
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


__all__ = ["CostState", "fingerprint_of"]
