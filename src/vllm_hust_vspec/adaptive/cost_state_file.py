"""The persisted cost state's file format (``adaptive_state_path``): read and payload.

File format (JSON): ``{"schema": "vspec-cost-state/1", "fingerprint": {name: value},
"saved": unix time, "samples": [{"batch", "gamma", "drafter_ran", "seconds", "count"}]}``.
The engine keeps and writes the state (host/engine/cost_prior/persisted.py); the settings'
preflight reads an existing file with :func:`read_state` so a wrong file fails at launch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vllm_hust_vspec.adaptive.cost_prior import CostPrior, CostSample

SCHEMA = "vspec-cost-state/1"


class CostStateError(ValueError):
    """The state file exists but is not a vSpec cost state (names the file and the key)."""


def read_state(path: str | os.PathLike[str]) -> tuple[dict[str, str], CostPrior] | None:
    """The file's fingerprint and samples; None if it does not exist. A file that exists but
    is not a valid state raises :class:`CostStateError` naming the file and the key."""
    p = Path(os.path.expanduser(os.fspath(path)))
    if not p.exists():
        return None
    where = f"vSpec cost state {str(p)!r}"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CostStateError(f"{where}: not readable JSON ({exc}); delete it or point "
                             "adaptive_state_path elsewhere") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise CostStateError(f"{where}: key 'schema' must be {SCHEMA!r} (a file written by "
                             "vSpec's adaptive_state_path); delete it or use another path")
    fp = data.get("fingerprint")
    if not isinstance(fp, dict) or not all(isinstance(v, str) for v in fp.values()):
        raise CostStateError(f"{where}: key 'fingerprint' must map names to strings")
    rows = data.get("samples")
    if not isinstance(rows, list):
        raise CostStateError(f"{where}: key 'samples' must be a list")
    samples = []
    for i, row in enumerate(rows):
        try:
            samples.append(CostSample(batch=int(row["batch"]), gamma=int(row["gamma"]),
                                      seconds=float(row["seconds"]),
                                      drafter_ran=bool(row["drafter_ran"]),
                                      count=int(row["count"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise CostStateError(f"{where}: samples[{i}] is not a cost sample ({exc})") from None
    return dict(fp), CostPrior(source=f"persisted state {p}", samples=tuple(samples))


def state_payload(fingerprint: dict[str, str], samples: tuple[CostSample, ...],
                  saved: float) -> dict[str, Any]:
    """The JSON object :func:`read_state` reads back."""
    return {"schema": SCHEMA, "fingerprint": fingerprint, "saved": round(saved, 3),
            "samples": [{"batch": s.batch, "gamma": s.gamma, "drafter_ran": s.drafter_ran,
                         "seconds": s.seconds, "count": s.count} for s in samples]}


__all__ = ["SCHEMA", "CostStateError", "read_state", "state_payload"]
