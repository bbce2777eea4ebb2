"""release.sh: check on built artefacts and on tampered ones, source-check, publish refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _lifecycle import RELEASE, Artefacts, built_artefacts, run_script

from vllm_hust_vspec import __version__

pytestmark = pytest.mark.build


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Artefacts:
    return built_artefacts(tmp_path_factory.getbasetemp())


def _check(*files: Path) -> subprocess.CompletedProcess[str]:
    return run_script(RELEASE, "check", *map(str, files))


def test_check_passes_on_built_artefacts(artefacts: Artefacts) -> None:
    files = [artefacts.wheel] + ([artefacts.sdist] if artefacts.sdist else [])
    res = _check(*files)
    assert res.returncode == 0, res.stderr
    assert f"check: OK {artefacts.wheel.name}" in res.stdout
    sums = [line for line in res.stdout.splitlines() if line.endswith((".whl", ".tar.gz"))
            and len(line.split()[0]) == 64]
    assert len(sums) == len(files)


def _rewrite_wheel(src: Path, dst: Path, member: str, data: bytes) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            zout.writestr(item, data if item.filename == member else zin.read(item.filename))


def test_check_fails_on_tampered_wheel(artefacts: Artefacts, tmp_path: Path) -> None:
    member = "vllm_hust_vspec/manifests/vllm-hust-extension-v0.2.json"
    with zipfile.ZipFile(artefacts.wheel) as zf:
        doc = json.loads(zf.read(member))
    doc["extension_version"] = "9.9.9"
    bad = tmp_path / artefacts.wheel.name
    _rewrite_wheel(artefacts.wheel, bad, member, json.dumps(doc).encode())
    res = _check(bad)
    assert res.returncode == 1
    assert f"RECORD hash mismatch for {member}" in res.stderr
    assert "version mismatch" in res.stderr
    # A code change that keeps the version is caught by RECORD alone.
    code = "vllm_hust_vspec/__init__.py"
    with zipfile.ZipFile(artefacts.wheel) as zf:
        patched = zf.read(code) + b"\nimport os  # injected\n"
    bad2 = tmp_path / "second" / artefacts.wheel.name
    bad2.parent.mkdir()
    _rewrite_wheel(artefacts.wheel, bad2, code, patched)
    res = _check(bad2)
    assert res.returncode == 1 and f"RECORD hash mismatch for {code}" in res.stderr


def test_check_fails_on_wrong_names_and_missing_content(artefacts: Artefacts,
                                                       tmp_path: Path) -> None:
    renamed = tmp_path / "vllm_hust_vspec-0.0.9-py3-none-any.whl"
    shutil.copy(artefacts.wheel, renamed)
    res = _check(renamed)
    assert res.returncode == 1 and "expected file name" in res.stderr
    if artefacts.sdist is None:
        pytest.skip("'build' is not installed: no sdist to check")
    stripped = tmp_path / artefacts.sdist.name
    import tarfile

    with tarfile.open(artefacts.sdist) as tin, tarfile.open(stripped, "w:gz") as tout:
        for m in tin.getmembers():
            if "/docs/" in m.name or m.name.endswith("/manage.sh"):
                continue
            tout.addfile(m, tin.extractfile(m) if m.isfile() else None)
    res = _check(stripped)
    assert res.returncode == 1
    assert "manage.sh is missing" in res.stderr


def _rewrite_sdist(src: Path, dst: Path, edit: dict[str, bytes | None]) -> None:
    """Copy an sdist, replacing (bytes) or dropping (None) members named by their tail."""
    import io
    import tarfile

    with tarfile.open(src) as tin, tarfile.open(dst, "w:gz") as tout:
        for m in tin.getmembers():
            tail = m.name.split("/", 1)[-1]
            if tail in edit:
                if edit[tail] is None:
                    continue
                data = edit[tail]
                assert data is not None
                m.size = len(data)
                tout.addfile(m, io.BytesIO(data))
                continue
            tout.addfile(m, tin.extractfile(m) if m.isfile() else None)


def test_check_requires_license_and_mod_metadata(artefacts: Artefacts, tmp_path: Path) -> None:
    lic = f"vllm_hust_vspec-{__version__}.dist-info/licenses/LICENSE"
    bad = tmp_path / artefacts.wheel.name
    with zipfile.ZipFile(artefacts.wheel) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            if item.filename != lic:
                zout.writestr(item, zin.read(item.filename))
    res = _check(bad)
    assert res.returncode == 1 and f"{lic} is missing" in res.stderr
    if artefacts.sdist is None:
        pytest.skip("'build' is not installed: no sdist to check")
    stripped = tmp_path / "stripped" / artefacts.sdist.name
    stripped.parent.mkdir()
    _rewrite_sdist(artefacts.sdist, stripped, {"LICENSE": None, "MOD_METADATA.json": None})
    res = _check(stripped)
    assert res.returncode == 1
    assert "LICENSE is missing" in res.stderr and "MOD_METADATA.json is missing" in res.stderr
    doc = json.loads((artefacts.source / "MOD_METADATA.json").read_text())
    doc["package"]["version"] = "9.9.9"
    doc["activation"]["default"] = "on"
    tampered = tmp_path / "tampered" / artefacts.sdist.name
    tampered.parent.mkdir()
    _rewrite_sdist(artefacts.sdist, tampered, {"MOD_METADATA.json": json.dumps(doc).encode()})
    res = _check(tampered)
    assert res.returncode == 1
    assert "MOD_METADATA.json: package/version: '9.9.9'" in res.stderr
    assert "MOD_METADATA.json: activation/default:" in res.stderr


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("package/version", "9.9.9", "package/version: '9.9.9' != package version"),
    ("activation/extension_id", "org.vllm-hust.other", "activation/extension_id:"),
    ("advisor_status", "maybe", "advisor_status: 'maybe' is not one of"),
    ("evidence/0/anchor", "9.999x nowhere", "evidence/0/anchor:"),
], ids=["version", "extension-id", "advisor", "stale-evidence"])
def test_source_check_fails_on_mod_metadata_mismatch(artefacts: Artefacts, tmp_path: Path,
                                                     key: str, value: str,
                                                     needle: str) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(artefacts.source, tree, symlinks=True)
    path = tree / "MOD_METADATA.json"
    doc = json.loads(path.read_text())
    *parents, last = key.split("/")
    node = doc
    for k in parents:
        node = node[int(k)] if isinstance(node, list) else node[k]
    node[int(last) if isinstance(node, list) else last] = value
    path.write_text(json.dumps(doc))
    res = run_script(tree / "release.sh", "source-check", "--fast", cwd=tree,
                     env={"VSPEC_PYTHON": sys.executable})
    assert res.returncode == 1
    assert f"MOD_METADATA.json: {needle}" in res.stderr, res.stderr


def test_source_check_fast_on_the_tree() -> None:
    res = run_script(RELEASE, "source-check", "--fast")
    assert res.returncode == 0, res.stderr
    assert f"version {__version__} is consistent" in res.stdout


@pytest.fixture(scope="module")
def release_repo(artefacts: Artefacts, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean git checkout of the copied tree with its two artefacts in (ignored) dist/."""
    if artefacts.sdist is None:
        pytest.skip("'build' is not installed: no sdist")
    repo = tmp_path_factory.mktemp("release") / "repo"
    shutil.copytree(artefacts.source, repo, symlinks=True)
    (repo / "dist").mkdir()
    for f in (artefacts.wheel, artefacts.sdist):
        shutil.copy(f, repo / "dist" / f.name)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run(git + args, check=True, capture_output=True)
    return repo


def _publish(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {"VSPEC_RELEASE_CONFIRM": "", "VSPEC_PYPI_TOKEN": "", "UV_PUBLISH_TOKEN": "",
            "TWINE_PASSWORD": ""}
    return run_script(repo / "release.sh", "publish", *args, env={**base, **env}, cwd=repo)


def test_publish_refusals_and_dry_run(release_repo: Path, tmp_path: Path) -> None:
    token = "pypi-SECRET-never-printed"
    res = _publish(release_repo, {})
    assert res.returncode == 1 and f"VSPEC_RELEASE_CONFIRM={__version__}" in res.stderr
    res = _publish(release_repo, {"VSPEC_RELEASE_CONFIRM": "0.0.0"})
    assert res.returncode == 1 and "VSPEC_RELEASE_CONFIRM" in res.stderr
    res = _publish(release_repo, {"VSPEC_RELEASE_CONFIRM": __version__})
    assert res.returncode == 1 and "no token" in res.stderr
    ok_env = {"VSPEC_RELEASE_CONFIRM": __version__, "VSPEC_PYPI_TOKEN": token}
    res = _publish(release_repo, ok_env, "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "TWINE_PASSWORD=***" in res.stdout and "twine upload" in res.stdout
    assert token not in res.stdout + res.stderr
    (release_repo / "stray.txt").write_text("dirty")
    try:
        res = _publish(release_repo, ok_env, "--dry-run")
        assert res.returncode == 1 and "not clean" in res.stderr
    finally:
        (release_repo / "stray.txt").unlink()
    outside = tmp_path / "not-git"
    outside.mkdir()
    shutil.copy(release_repo / "release.sh", outside / "release.sh")
    (outside / "src/vllm_hust_vspec").mkdir(parents=True)
    shutil.copy(release_repo / "src/vllm_hust_vspec/_version.py",
                outside / "src/vllm_hust_vspec/_version.py")
    res = run_script(outside / "release.sh", "publish", env=ok_env, cwd=outside)
    assert res.returncode == 1 and "not a git checkout" in res.stderr


def test_publish_accepts_the_predecessors_token_variable(release_repo: Path) -> None:
    """UV_PUBLISH_TOKEN (the predecessor's name) works like VSPEC_PYPI_TOKEN; never printed."""
    token, other = "pypi-UV-SECRET", "pypi-OTHER-SECRET"
    confirm = {"VSPEC_RELEASE_CONFIRM": __version__}
    for env in ({"UV_PUBLISH_TOKEN": token},
                {"UV_PUBLISH_TOKEN": token, "VSPEC_PYPI_TOKEN": token}):
        res = _publish(release_repo, {**confirm, **env}, "--dry-run")
        assert res.returncode == 0, res.stderr
        assert "TWINE_PASSWORD=***" in res.stdout and "twine upload" in res.stdout
        assert token not in res.stdout + res.stderr
    res = _publish(release_repo, {**confirm, "UV_PUBLISH_TOKEN": token,
                                  "VSPEC_PYPI_TOKEN": other}, "--dry-run")
    assert res.returncode == 1
    assert "VSPEC_PYPI_TOKEN and UV_PUBLISH_TOKEN are both set and differ" in res.stderr
    assert token not in res.stdout + res.stderr and other not in res.stdout + res.stderr
    assert "twine upload" not in res.stdout
