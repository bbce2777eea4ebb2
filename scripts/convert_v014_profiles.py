#!/usr/bin/env python3
"""Convert vllm-hust-vspec 0.14's ``profiles/*.json`` to schema-v1 files under the same names.

The manual of 0.14 starts the profile policy with ``--adaptive-profile
profiles/qwen25_*.json``; the launcher reads a 0.14 profile as it is (adaptive/profile_v014.py),
and this script writes the schema-v1 equivalents with their provenance (source file and its
sha256) so the checkout's ``profiles/`` holds them under the names the manual uses. Those
files are the predecessor's placeholder latency models (a fixed 100 ms target and 20 ms draft
forward, no batch or context terms) and their batch -> gamma tables: not measurements.

    pip download --no-deps --no-binary :all: vllm-hust-vspec==0.14.3 -d /tmp/pred
    .venv/bin/python scripts/convert_v014_profiles.py /tmp/pred/vllm_hust_vspec-0.14.3.tar.gz
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vllm_hust_vspec.adaptive.profile_v014 import convert_v014  # noqa: E402

NOTE = ("Converted by scripts/convert_v014_profiles.py from vllm-hust-vspec {version}'s "
        "profiles/{name} (sha256 {sha}). A placeholder latency model of that release (target "
        "forward {target:g} ms, draft forward {draft:g} ms, no batch or context terms) with its "
        "batch -> gamma table: not a measurement. Measure your host with "
        "vllm-hust-vspec-profile for a model of its real costs.")


def read_sources(source: Path) -> tuple[str, dict[str, bytes]]:
    """(version, {file name: bytes}) of the ``profiles/*.json`` in an sdist or a folder."""
    if source.is_dir():
        files = {p.name: p.read_bytes() for p in sorted((source / "profiles").glob("*.json"))}
        return source.name.rsplit("-", 1)[-1], files
    out: dict[str, bytes] = {}
    with tarfile.open(source) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if len(parts) == 3 and parts[1] == "profiles" and parts[2].endswith(".json"):
                handle = tar.extractfile(member)
                if handle is not None:
                    out[parts[2]] = handle.read()
    version = source.name.removesuffix(".tar.gz").rsplit("-", 1)[-1]
    return version, dict(sorted(out.items()))


def convert(name: str, raw: bytes, version: str) -> dict[str, object]:
    """The schema-v1 document of one 0.14 profile, with its provenance in ``notes``."""
    data = json.loads(raw)
    profile = convert_v014(data, source=f"profiles/{name}")
    notes = NOTE.format(version=version, name=name, sha=hashlib.sha256(raw).hexdigest()[:16],
                        target=data["target"]["delta_ms"], draft=data["draft"]["delta_ms"])
    profile = dataclasses.replace(profile, name=Path(name).stem, notes=notes)
    return profile.to_dict()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path,
                        help="the 0.14 sdist (.tar.gz) or its unpacked folder")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parents[1] / "profiles",
                        help="where the converted files go (default: the checkout's profiles/)")
    args = parser.parse_args()
    version, files = read_sources(args.source)
    if not files:
        print(f"convert_v014_profiles: no profiles/*.json in {args.source}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name, raw in files.items():
        path = args.out / name
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(convert(name, raw, version), indent=2) + "\n",
                       encoding="utf-8")
        tmp.replace(path)
        print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
