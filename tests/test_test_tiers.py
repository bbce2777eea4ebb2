"""The suite's own selection (tests/conftest.py): ``--alone`` keeps or drops the tests that
``scripts/test.sh`` runs by themselves after the parallel phase."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SAMPLE = '''
import pytest


@pytest.mark.alone
def test_timed():
    pass


def test_plain():
    pass
'''


@pytest.mark.slow
@pytest.mark.parametrize(("choice", "ran"), [
    ("with", {"test_timed", "test_plain"}),
    ("skip", {"test_plain"}),
    ("only", {"test_timed"}),
])
def test_alone_keeps_or_drops_the_marked_tests(tmp_path: Path, choice: str,
                                               ran: set[str]) -> None:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-v",
         f"--alone={choice}", "-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = {line.split("::")[1].split()[0] for line in proc.stdout.splitlines()
              if "::" in line and "PASSED" in line}
    assert passed == ran, proc.stdout
