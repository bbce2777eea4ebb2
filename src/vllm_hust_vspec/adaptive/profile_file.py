"""Reading a profile: schema v1 (:mod:`.profile`) or the vllm-hust-vspec 0.14 format
(:mod:`.profile_v014`, recognised by its keys and converted exactly)."""

from __future__ import annotations

from pathlib import Path

from ._files import read_json_file
from .profile import Profile, ProfileError
from .profile_v014 import convert_v014, is_v014_profile


def parse_profile(data: object, *, source: str = "<profile>") -> Profile:
    """Parse and validate a schema-v1 mapping, or convert one in the vllm-hust-vspec 0.14
    format (recognised by its keys); errors name ``source`` and the key."""
    if is_v014_profile(data):
        return convert_v014(data, source=source)
    return Profile.from_dict(data, source=source)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile JSON file; errors name the file and the key."""
    p = Path(path)
    return parse_profile(read_json_file(p, "profile", ProfileError), source=str(p))


__all__ = ["load_profile", "parse_profile"]
