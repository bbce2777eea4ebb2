"""Fetch the released vLLM-HUST core (``vllm-hust==0.17.2.post1``, an sdist) into .cache/hust.

``pip download`` of this sdist installs its build requirements (a CUDA torch among them) just
to read its metadata, so the file is fetched by name from the package index's simple API
instead (the page pip reads) and checked against the index's sha256. Tests that need it skip
with the reason when the index cannot be reached.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "hust"
VERSION = "0.17.2.post1"
NAME = f"vllm_hust-{VERSION}"
# The package index's simple API (PEP 503), the one pip reads.
INDEX = "https://pypi.org/simple/vllm-hust/"


class Unavailable(RuntimeError):
    """The sdist cannot be fetched here."""


def sdist() -> Path:
    """Path of ``vllm_hust-0.17.2.post1.tar.gz``, downloading it once."""
    path = CACHE / f"{NAME}.tar.gz"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(INDEX, timeout=60) as r:
            page = r.read().decode()
        href = next(m.group(1) for m in re.finditer(r'href="([^"]+)"', page)
                    if urllib.parse.urlsplit(m.group(1)).path.endswith("/" + path.name))
        url = urllib.parse.urljoin(INDEX, href)
        expected = urllib.parse.urlsplit(url).fragment.removeprefix("sha256=")
        part = path.with_suffix(".part")
        urllib.request.urlretrieve(url.split("#", 1)[0], part)
        if expected and hashlib.sha256(part.read_bytes()).hexdigest() != expected:
            part.unlink()
            raise OSError(f"{path.name}: sha256 differs from the index's")
        part.rename(path)
    except (OSError, StopIteration, ValueError) as exc:
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
