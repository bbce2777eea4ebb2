"""The bundled tiny models of a source checkout, found the way ``./run.sh`` finds them.

``run.sh`` exports ``HUST_VSPEC_MODEL_DIR=<checkout>/.cache/models`` when the variable is unset
and that folder exists (``scripts/build_tiny_models.py`` fills it); the ``cpu-tiny`` preset's
``vspec-tiny/target`` and ``vspec-tiny/draft`` then resolve to its ``target`` and ``draft``
folders. Commands started without run.sh (the bench, the profiler) apply the same default
through :func:`with_checkout_model_dir`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vllm_hust_vspec.launch.models import MODEL_DIR_ENV

# src/vllm_hust_vspec/bench/models.py -> the checkout; in an installed wheel this is some
# lib/ folder without run.sh, so nothing is found there.
CHECKOUT_ROOT = Path(__file__).resolve().parents[3]


def checkout_model_dir(root: Path | None = None) -> Path | None:
    """``<checkout>/.cache/models`` when ``root`` (default: this package's checkout) is a
    source checkout (it holds run.sh) with that folder, else None."""
    base = CHECKOUT_ROOT if root is None else root
    models = base / ".cache" / "models"
    if (base / "run.sh").is_file() and models.is_dir():
        return models.resolve()
    return None


def with_checkout_model_dir(env: Mapping[str, str]) -> tuple[dict[str, str], Path | None]:
    """``env`` (copied) with ``HUST_VSPEC_MODEL_DIR`` set to the checkout's tiny models when
    it is unset or empty, as run.sh does; also the folder it was set to (None: unchanged)."""
    out = dict(env)
    if out.get(MODEL_DIR_ENV):
        return out, None
    models = checkout_model_dir()
    if models is not None:
        out[MODEL_DIR_ENV] = str(models)
    return out, models


__all__ = ["CHECKOUT_ROOT", "MODEL_DIR_ENV", "checkout_model_dir", "with_checkout_model_dir"]
