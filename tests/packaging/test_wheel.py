"""The built (non-editable) wheel exposes its entry points and data in a fresh venv."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _lifecycle import built_artefacts

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.build

PROBE = """
import json
from importlib import metadata, resources
eps = {g: sorted(f"{e.name}={e.value}" for e in metadata.entry_points(group=g))
       for g in ("vllm.general_plugins", "vllm_hust.extension_bundles", "console_scripts")}
import vllm_hust_vspec
from vllm_hust_vspec.settings import list_presets
from vllm_hust_vspec.metadata import load_schema
manifests = [p.name for p in resources.files("vllm_hust_vspec.manifests").iterdir()
             if p.name.endswith(".json")]
v02 = [p.name for p in resources.files("vllm_hust_vspec.manifests.v0_2").iterdir()
       if p.name.endswith(".json")]
bundle_doc = json.loads(resources.files("vllm_hust_vspec.manifests")
                        .joinpath("vllm-hust-extension-v0.2.json").read_text())
schemas = sorted(p.name for p in resources.files("vllm_hust_vspec.manifests")
                 .joinpath("schemas").iterdir())
print(json.dumps({"eps": eps, "version": vllm_hust_vspec.__version__,
                  "file": vllm_hust_vspec.__file__, "presets": list_presets(),
                  "manifests": manifests, "v02": v02, "schemas": schemas,
                  "bundle_schema": bundle_doc["schema_version"],
                  "claims": bundle_doc["resource_claims"],
                  "license": metadata.metadata("vllm-hust-vspec")["License-Expression"],
                  "license_files": sorted(str(f) for f in metadata.files("vllm-hust-vspec")
                                          if "licenses" in str(f)),
                  "mod_schema": load_schema()["$id"]}))
"""


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    # Built once per session from a clean copy (stale build/ files cannot leak in).
    wheels = [built_artefacts(tmp_path_factory.getbasetemp()).wheel]
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         str(wheels[0])],
        check=True, capture_output=True,
    )
    return venv


def test_entry_points_from_installed_wheel(fresh_venv: Path) -> None:
    out = subprocess.run(
        [str(fresh_venv / "bin" / "python"), "-c", PROBE], capture_output=True, text=True,
        check=True, cwd="/",
    )
    info = json.loads(out.stdout)
    assert "vspec=vllm_hust_vspec:register" in info["eps"]["vllm.general_plugins"]
    assert (
        "org.vllm-hust.vspec=vllm_hust_vspec.manifests"
        in info["eps"]["vllm_hust.extension_bundles"]
    )
    assert "vllm-hust-vspec=vllm_hust_vspec.cli.launch:main" in info["eps"]["console_scripts"]
    assert str(fresh_venv) in info["file"]  # the wheel, not the source tree
    assert "cpu-tiny" in info["presets"]
    assert info["manifests"] == ["vllm-hust-extension-v0.2.json"]  # the discovered one, alone
    assert info["v02"] == ["vllm-hust-extension-v0.2.json"]
    # the discovered manifest is the 0.3-experimental one and carries the exclusive claims
    assert info["bundle_schema"] == "0.3-experimental"
    assert {c["mode"] for c in info["claims"]} == {"exclusive", "shared"}
    assert info["schemas"] == ["manifest-0.2-experimental.schema.json",
                               "manifest-0.3-experimental.schema.json",
                               "mod-metadata.schema.json"]
    from vllm_hust_vspec import __version__

    assert info["version"] == __version__
    assert info["license"] == "Apache-2.0"
    assert info["license_files"] == [f"vllm_hust_vspec-{__version__}.dist-info/licenses/LICENSE"]
    assert info["mod_schema"] == "urn:vllm-hust-vspec:mod-metadata:1"


def test_license_and_metadata_in_the_artefacts(tmp_path_factory: pytest.TempPathFactory) -> None:
    import tarfile
    import zipfile

    from vllm_hust_vspec import __version__

    art = built_artefacts(tmp_path_factory.getbasetemp())
    with zipfile.ZipFile(art.wheel) as zf:
        lic = zf.read(f"vllm_hust_vspec-{__version__}.dist-info/licenses/LICENSE")
    assert lic == (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in lic and b"Version 2.0, January 2004" in lic
    if art.sdist is None:
        pytest.skip("'build' is not installed: no sdist")
    top = f"vllm_hust_vspec-{__version__}"
    with tarfile.open(art.sdist) as tf:
        for name in ("LICENSE", "MOD_METADATA.json"):
            handle = tf.extractfile(f"{top}/{name}")
            assert handle is not None and handle.read() == (ROOT / name).read_bytes()


def test_installed_launcher_runs(fresh_venv: Path) -> None:
    out = subprocess.run(
        [str(fresh_venv / "bin" / "vllm-hust-vspec"), "--list-presets"],
        capture_output=True, text=True, check=True,
    )
    assert "eagle" in out.stdout.split()
