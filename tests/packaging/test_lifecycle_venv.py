"""Real installs in temp venvs: manage.sh install, discovery without runtime imports, uninstall,
and a copy visible from a parent environment (user site seen through --system-site-packages)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _lifecycle import (
    MANAGE,
    ROOT,
    Artefacts,
    built_artefacts,
    fake_manager,
    make_venv,
    run_script,
    site_packages,
)

from vllm_hust_vspec import __version__

pytestmark = pytest.mark.build

# The test venvs have no pip of their own (saves ensurepip); manage.sh uses this one via --python.
PIP_ENV = {"VSPEC_PIP_ARGS": "--no-index", "VSPEC_PIP": f"{sys.executable} -m pip"}


def pip(py: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """Run the dev venv's pip against another interpreter."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), *args, "-q",
                    "--no-index", "--no-deps"], check=True, capture_output=True,
                   env={**os.environ, **(env or {})})

DISCOVERY_PROBE = r"""
import json, sys
from importlib import metadata
before = set(sys.modules)
ep = [e for e in metadata.entry_points(group="vllm_hust.extension_bundles")
      if e.name == "org.vllm-hust.vspec"]
assert len(ep) == 1, ep
ep = ep[0]
# The manager's way: the file list of the distribution, no import at all.
wanted = ep.value.replace(".", "/") + "/vllm-hust-extension-v0.2.json"
files = [f for f in ep.dist.files if str(f).startswith(ep.value.replace(".", "/") + "/")
         and str(f).count("/") == ep.value.count(".") + 1 and str(f).endswith(".json")]
manifest = json.loads(ep.dist.locate_file(files[0]).read_text())
metadata_only = sorted(m for m in set(sys.modules) - before if m.startswith("vllm_hust_vspec"))
# The resources way imports the bundle package (and its parent) -- but no runtime code.
from importlib import resources
again = json.loads(resources.files(ep.value).joinpath(files[0].name).read_text())
plugin = [e for e in metadata.entry_points(group="vllm.general_plugins") if e.name == "vspec"]
after_resources = sorted(m for m in sys.modules if m.startswith("vllm_hust_vspec"))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("vllm", "torch", "vllm_ascend"))
plugin[0].load()()  # the gate is off: register() must return without importing the host
after_register = sorted(m for m in sys.modules if m.startswith("vllm_hust_vspec"))
print(json.dumps({"files": [str(f) for f in files], "wanted": wanted, "manifest": manifest,
                  "same": manifest == again, "metadata_only": metadata_only,
                  "after_resources": after_resources, "heavy": heavy,
                  "plugin": [plugin[0].value], "after_register": after_register}))
"""


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Artefacts:
    return built_artefacts(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def installed(artefacts: Artefacts, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """A fresh venv with the wheel installed through manage.sh (no index, no manager)."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    py = make_venv(venv, with_pip=False)
    res = run_script(MANAGE, "--python", str(py), "install", "--wheel", str(artefacts.wheel),
                     env=PIP_ENV)
    return venv, py, res


def test_manage_install_wheel_in_fresh_venv(installed: tuple[Path, Path, object]) -> None:
    venv, py, res = installed
    assert isinstance(res, subprocess.CompletedProcess)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert f"installed vllm-hust-vspec {__version__}" in out
    assert "OK   [0.2-experimental]" in out and "OK   [0.3-experimental]" in out
    # this venv has no vLLM: nothing for the doctor to check, which is said, not failed
    assert "no vLLM host (vllm, vllm_ascend)" in out and "doctor --adaptive" not in out
    assert "restarted" in out
    assert (venv / "bin" / "vllm-hust-vspec").is_file()
    assert list(site_packages(venv).glob(f"vllm_hust_vspec-{__version__}.dist-info"))


def test_discovery_without_runtime_imports(installed: tuple[Path, Path, object]) -> None:
    venv, py, _ = installed
    out = subprocess.run([str(py), "-c", DISCOVERY_PROBE], capture_output=True, text=True,
                         check=True, cwd="/")
    info = json.loads(out.stdout)
    assert info["files"] == [info["wanted"]]  # exactly one manifest directly in the package
    assert info["manifest"]["schema_version"] == "0.3-experimental"
    assert info["manifest"]["extension_version"] == __version__
    assert info["same"]
    assert info["metadata_only"] == []  # the manager's discovery imports nothing of vSpec
    assert set(info["after_resources"]) <= {
        "vllm_hust_vspec", "vllm_hust_vspec._version", "vllm_hust_vspec.manifests"}
    assert info["heavy"] == []
    assert info["plugin"] == ["vllm_hust_vspec:register"]
    runtime = {"host", "settings", "adaptive", "launch", "cli", "sim", "bundle"}
    assert not [m for m in info["after_register"] if m.split(".")[1:2] and
                m.split(".")[1] in runtime]


def test_installed_console_script_validates(installed: tuple[Path, Path, object]) -> None:
    venv, _, _ = installed
    res = subprocess.run([str(venv / "bin" / "vllm-hust-vspec"), "manifest", "validate"],
                         capture_output=True, text=True, cwd="/")
    assert res.returncode == 0, res.stdout
    assert "host: vLLM is not installed here" in res.stdout
    show = subprocess.run([str(venv / "bin" / "vllm-hust-vspec"), "manifest", "show",
                           "--format", "path"], capture_output=True, text=True, check=True)
    assert show.stdout.strip().startswith(str(venv))


def test_installed_manifest_tampering_is_a_version_mismatch(
    installed: tuple[Path, Path, object], tmp_path: Path
) -> None:
    venv, _, _ = installed
    target = site_packages(venv) / "vllm_hust_vspec/manifests/vllm-hust-extension-v0.2.json"
    saved = tmp_path / "saved.json"
    shutil.copy(target, saved)
    try:
        doc = json.loads(target.read_text())
        doc["extension_version"] = "9.9.9"
        target.write_text(json.dumps(doc))
        res = subprocess.run([str(venv / "bin" / "vllm-hust-vspec"), "manifest", "validate"],
                             capture_output=True, text=True, cwd="/")
        assert res.returncode == 1
        assert "version mismatch" in res.stdout and "9.9.9" in res.stdout
    finally:
        shutil.copy(saved, target)


def test_upgrade_with_mislabelled_wheel_fails(installed: tuple[Path, Path, object],
                                              artefacts: Artefacts, tmp_path: Path) -> None:
    _, py, _ = installed
    fake = tmp_path / "vllm_hust_vspec-9.9.9-py3-none-any.whl"
    shutil.copy(artefacts.wheel, fake)
    res = run_script(MANAGE, "--python", str(py), "upgrade", "--wheel", str(fake),
                     env=PIP_ENV)
    assert res.returncode != 0
    assert "9.9.9" in res.stdout + res.stderr


def test_uninstall_for_real_leaves_the_host_alone(artefacts: Artefacts, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    py = make_venv(venv, with_pip=False)
    sp = site_packages(venv)
    # A stand-in host distribution: uninstall must not touch it.
    host = sp / "vllm-0.32.0.dist-info"
    host.mkdir()
    (host / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    (host / "RECORD").write_text("")
    pip(py, "install", str(artefacts.wheel))
    log = tmp_path / "ext.log"
    bindir = tmp_path / "bin"
    fake_manager(bindir, log)
    res = run_script(MANAGE, "--python", str(py), "uninstall", path_dirs=(bindir,),
                     env=PIP_ENV)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert log.read_text().splitlines() == ["extension disable org.vllm-hust.vspec",
                                            "extension forget org.vllm-hust.vspec"]
    assert "running vLLM servers keep the plugin" in out
    assert not list(sp.glob("vllm_hust_vspec*"))
    assert not (venv / "bin" / "vllm-hust-vspec").exists()
    assert host.is_dir()
    probe = "from importlib.metadata import version; print(version('vllm'))"
    assert subprocess.run([str(py), "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "0.32.0"
    again = run_script(MANAGE, "--python", str(py), "uninstall", "--no-manager")
    assert again.returncode == 0 and "is not installed in this environment" in again.stdout


@pytest.fixture(scope="module")
def parent_and_child(artefacts: Artefacts, tmp_path_factory: pytest.TempPathFactory
                     ) -> tuple[dict[str, str], Path, Path]:
    """A user site (the parent environment) holding vSpec, and a child venv that sees it."""
    base = tmp_path_factory.mktemp("parent")
    userbase = base / "userbase"
    child = base / "child"
    py = make_venv(child, system_site=True, with_pip=False)
    env = {"PYTHONUSERBASE": str(userbase)}
    usersite = subprocess.run([str(py), "-c", "import site; print(site.getusersitepackages())"],
                              capture_output=True, text=True, check=True, env=env
                              ).stdout.strip()
    pip(py, "install", "--target", usersite, str(artefacts.wheel), env=env)
    return env, py, Path(usersite)


def test_parent_environment_copy_is_reported_not_removed(
    parent_and_child: tuple[dict[str, str], Path, Path]
) -> None:
    env, py, usersite = parent_and_child
    res = run_script(MANAGE, "--python", str(py), "uninstall", env=env)
    err = res.stderr
    assert res.returncode == 3, res.stdout + err
    assert "is not installed in this environment" in res.stdout
    assert f"stays visible from outside this environment: {usersite}" in err
    assert "does not cross the environment boundary" in err
    assert list(usersite.glob("vllm_hust_vspec-*.dist-info"))  # untouched


def test_parent_copy_remains_after_removing_the_env_copy(
    parent_and_child: tuple[dict[str, str], Path, Path], artefacts: Artefacts
) -> None:
    env, py, usersite = parent_and_child
    child_sp = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig."
                                    "get_paths()['purelib'])"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    pip(py, "install", "--ignore-installed", str(artefacts.wheel), env=env)
    assert list(child_sp.glob("vllm_hust_vspec-*.dist-info"))
    dry = run_script(MANAGE, "--dry-run", "--python", str(py), "uninstall", env=env)
    assert dry.returncode == 3 and "would run:" in dry.stdout
    assert list(child_sp.glob("vllm_hust_vspec-*.dist-info"))  # the dry run removed nothing
    res = run_script(MANAGE, "--python", str(py), "uninstall", env=env)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "pip uninstall -y vllm-hust-vspec" in res.stdout
    assert not list(child_sp.glob("vllm_hust_vspec-*.dist-info"))
    assert list(usersite.glob("vllm_hust_vspec-*.dist-info"))
    assert str(usersite) in res.stderr


# --- rollback to the predecessor 0.14.3 and upgrade back, for real ---------------------------

OLD = "0.14.3"  # the predecessor's last release, same distribution name on PyPI
OLD_WHEEL = f"vllm_hust_vspec-{OLD}-py3-none-any.whl"

MANIFEST_PROBE = r"""
import json
from importlib import metadata, resources
pkg = resources.files("vllm_hust_vspec.manifests")
(found,) = [f for f in pkg.iterdir() if f.name.endswith(".json")]
doc = json.loads(found.read_text())
print(json.dumps({"version": metadata.version("vllm-hust-vspec"), "file": found.name,
                  "id": doc["extension_id"], "extension_version": doc["extension_version"]}))
"""


@pytest.fixture(scope="module")
def predecessor_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 0.14.3 wheel: from .cache/hust, else downloaded from PyPI (skips if that fails)."""
    cached = ROOT / ".cache" / "hust" / OLD_WHEEL
    if cached.is_file():
        return cached
    out = tmp_path_factory.mktemp("predecessor")
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                        str(out), f"vllm-hust-vspec=={OLD}"], check=True, capture_output=True,
                       text=True, timeout=120)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"vllm-hust-vspec {OLD} is not in {cached} and could not be downloaded "
                    f"from the index: {getattr(exc, 'stderr', '') or exc}")
    return out / OLD_WHEEL


def probe_manifest(py: Path) -> dict[str, str]:
    out = subprocess.run([str(py), "-c", MANIFEST_PROBE], capture_output=True, text=True,
                         check=True, cwd="/")
    return dict(json.loads(out.stdout))


def test_rollback_to_the_predecessor_and_upgrade_back(artefacts: Artefacts,
                                                      predecessor_wheel: Path,
                                                      tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    py = make_venv(venv, with_pip=False)
    pip(py, "install", str(artefacts.wheel))
    assert probe_manifest(py)["version"] == __version__

    res = run_script(MANAGE, "--python", str(py), "rollback", "--wheel", str(predecessor_wheel),
                     env=PIP_ENV)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert f"rollback: {__version__} -> {OLD}" in out
    assert f"installed vllm-hust-vspec {OLD}" in out
    assert f"installed manifest vllm-hust-extension-v0.2.json: org.vllm-hust.vspec {OLD}" in out
    assert "has no vllm_hust_vspec.cli.manifest" in out
    # the predecessor's doctor needs vLLM; its failure is only a warning here
    assert f"{venv}/bin/vllm-hust-vspec-doctor --adaptive" in out
    assert "warning: the host check failed" in out
    assert probe_manifest(py) == {"version": OLD, "file": "vllm-hust-extension-v0.2.json",
                                  "id": "org.vllm-hust.vspec", "extension_version": OLD}

    wrong = run_script(MANAGE, "--python", str(py), "rollback", "--wheel",
                       str(artefacts.wheel), env=PIP_ENV)
    assert wrong.returncode == 2 and "use './manage.sh upgrade'" in wrong.stderr

    res = run_script(MANAGE, "--python", str(py), "upgrade", "--wheel", str(artefacts.wheel),
                     env=PIP_ENV)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert f"upgrade: {OLD} -> {__version__}" in out
    assert f"installed vllm-hust-vspec {__version__}" in out
    assert "OK   [0.2-experimental]" in out and "OK   [0.3-experimental]" in out
    assert "no vLLM host (vllm, vllm_ascend)" in out and "warning:" not in out
    assert probe_manifest(py) == {"version": __version__,
                                  "file": "vllm-hust-extension-v0.2.json",
                                  "id": "org.vllm-hust.vspec", "extension_version": __version__}
