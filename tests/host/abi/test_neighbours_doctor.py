"""The doctor names the plugins installed beside vSpec and the wrappers they put on vSpec's
targets: kvcompress's real plugin (loaded by ``--with-plugins`` as vLLM would) and an unknown
plugin, which is a warning naming it, not a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import _siblings  # noqa: E402

pytestmark = pytest.mark.vllm
KV = "vllm-ascend-kvcompress-hust"

UNKNOWN_PLUGIN = '''
def register():
    from vllm.v1.core.sched.scheduler import Scheduler
    if Scheduler.__dict__.get("_acme_installed"):
        return
    original = Scheduler.schedule

    def schedule(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    Scheduler.schedule = schedule
    Scheduler._acme_installed = True
'''


def _unknown_plugin(root: Path) -> Path:
    """A distribution vSpec has no rule for, registering a general plugin."""
    (root / "acme_sched.py").write_text(UNKNOWN_PLUGIN)
    info = root / "acme_sched_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-sched-plugin\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\n"
                                           "acme = acme_sched:register\n")
    (info / "top_level.txt").write_text("acme_sched\n")
    (info / "RECORD").write_text("acme_sched.py,,\n")
    return root


def _doctor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    kv = _siblings.source_root(KV)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(kv), str(_unknown_plugin(tmp_path))]),
           "VLLM_ASCEND_KVCOMPRESS_ENABLED": "1", "VLLM_ASCEND_KVCOMPRESS_CONFIG": "{}"}
    env.pop("HUST_VSPEC_ENABLED", None)
    return subprocess.run([sys.executable, "-m", "vllm_hust_vspec.cli.doctor", *args],
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow
def test_doctor_text_names_plugins_and_wrappers(tmp_path: Path) -> None:
    r = _doctor(tmp_path, "--with-plugins")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert f"{KV} 0.10.0 enabled" in out
    assert "acme-sched-plugin 1.0" in out and "rule: none decided (unknown to vSpec)" in out
    for method in ("__init__", "schedule", "update_from_output"):
        assert (f"vllm.v1.core.sched.scheduler.Scheduler.{method}: wrapped by {KV} "
                "(via closure)") in out
    assert "vllm.v1.core.sched.scheduler.Scheduler.schedule: wrapped by acme-sched-plugin" in out
    assert "warning: acme-sched-plugin wraps vllm.v1.core.sched.scheduler.Scheduler.schedule" \
        in out
    assert "result: OK" in out


@pytest.mark.slow
def test_doctor_without_loading_plugins_names_them_but_sees_no_wrapper(tmp_path: Path) -> None:
    r = _doctor(tmp_path, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    plugins = {p["distribution"]: p for p in doc["other_plugins"]}
    assert plugins[KV]["enabled"] is True and plugins[KV]["rule"] == "composes"
    assert plugins["acme-sched-plugin"]["rule"] is None
    assert doc["foreign_wrappers"] == []
    assert "vllm.v1.core.sched.scheduler.Scheduler.schedule" in doc["patched_targets"]
