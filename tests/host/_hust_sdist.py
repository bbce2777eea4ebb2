"""Fetch the released vLLM-HUST core (``vllm-hust==0.17.2.post1``, an sdist) into .cache/hust.

``pip download`` of this sdist installs its build requirements (a CUDA torch among them) just
to read its metadata, so the file is fetched by name through the package index's JSON API
instead (the same registry pip uses). Tests that need it skip with the reason when the index
cannot be reached.
"""

from __future__ import annotations

import json
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "hust"
VERSION = "0.17.2.post1"
NAME = f"vllm_hust-{VERSION}"


class Unavailable(RuntimeError):
    """The sdist cannot be fetched here."""


def sdist() -> Path:
    """Path of ``vllm_hust-0.17.2.post1.tar.gz``, downloading it once."""
    path = CACHE / f"{NAME}.tar.gz"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(
                f"https://pypi.org/pypi/vllm-hust/{VERSION}/json", timeout=60) as r:
            files = json.load(r)["urls"]
        url = next(f["url"] for f in files if f["filename"] == path.name)
        part = path.with_suffix(".part")
        urllib.request.urlretrieve(url, part)
        part.rename(path)
    except (OSError, StopIteration, KeyError, ValueError) as exc:
        raise Unavailable(f"cannot fetch {path.name} from the package index: {exc}") from exc
    return path


def source_file(relative: str) -> str:
    """The text of one file of the core's source tree (``vllm/...``)."""
    with tarfile.open(sdist()) as tar:
        member = tar.extractfile(f"{NAME}/{relative}")
        if member is None:
            raise FileNotFoundError(relative)
        return member.read().decode()


if __name__ == "__main__":  # scripts/setup_hust_core.sh: print the sdist's path
    print(sdist())
