"""The patch layer composes with other plugins' wrappers: it wraps whatever is installed,
never stacks two vSpec layers on one target, and undo removes only vSpec's layer."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from vllm_hust_vspec.host import patching
from vllm_hust_vspec.host.patching import Patcher, chain, host_function, is_patched, layers

HOST_SRC = '''
class Scheduler:
    def schedule(self, n):
        return ["host"]
'''

# Wraps as kvcompress does: a closure over the original, no __wrapped__, an installed flag on
# the class, and a marker attribute on its own function.
PLUGIN_SRC = '''
def install(cls, log):
    if cls.__dict__.get("_fake_installed", False):
        return
    original = cls.schedule

    def schedule(self, n):
        log.append("plugin")
        return original(self, n) + ["plugin"]

    schedule._fake_marker = True
    cls.schedule = schedule
    cls._fake_installed = True
'''


def _module(name: str, source: str) -> types.ModuleType:
    path = f"/fake-site/{name.replace('.', '/')}.py"
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(source, path, "exec"), mod.__dict__)  # noqa: S102 - test fixture source
    return mod


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[type, types.ModuleType]]:
    """A fresh host class and a plugin module, with ``fakehost`` counted as the host."""
    host = _module("fakehost.sched", HOST_SRC)
    plugin = _module("fakeplugin.stateful", PLUGIN_SRC)
    monkeypatch.setattr(patching, "HOST_PACKAGES", ("fakehost",))
    patching._module_of_file.cache_clear()
    yield host.Scheduler, plugin
    for name in ("fakehost.sched", "fakeplugin.stateful"):
        sys.modules.pop(name, None)
    patching._module_of_file.cache_clear()


def _vspec(orig):  # type: ignore[no-untyped-def]
    def schedule(self, n):  # type: ignore[no-untyped-def]
        return orig(self, n) + ["vspec"]

    return schedule


def _vspec_layers(cls: type) -> int:
    return sum(layer.by == patching.VSPEC for layer in layers(cls, "schedule"))


@pytest.mark.parametrize("plugin_first", [True, False])
def test_either_order_runs_both_layers_once(world, plugin_first: bool) -> None:
    cls, plugin = world
    log: list[str] = []
    p = Patcher("t")
    if plugin_first:
        plugin.install(cls, log)
        p.wrap(cls, "schedule", _vspec)
    else:
        p.wrap(cls, "schedule", _vspec)
        plugin.install(cls, log)
    out = cls().schedule(1)
    assert sorted(out) == ["host", "plugin", "vspec"] and log == ["plugin"]
    assert _vspec_layers(cls) == 1
    found = layers(cls, "schedule")
    assert [x.by for x in found if not x.host and x.by != patching.VSPEC] == ["fakeplugin"]
    assert found[-1].host
    p.undo()
    assert cls().schedule(1) == ["host", "plugin"]  # the plugin's wrapper survives undo
    assert not is_patched(cls, "schedule")


def test_undo_under_a_plugin_leaves_a_pass_through_and_rewrap_rearms_it(world) -> None:
    cls, plugin = world
    p = Patcher("t")
    p.wrap(cls, "schedule", _vspec)
    plugin.install(cls, [])
    p.undo()
    assert cls().schedule(1) == ["host", "plugin"]
    q = Patcher("t2")
    q.wrap(cls, "schedule", _vspec)
    assert cls().schedule(1) == ["host", "vspec", "plugin"]
    assert _vspec_layers(cls) == 1  # re-armed, not stacked
    with pytest.raises(patching.PatchError, match="refusing to patch it twice"):
        q.wrap(cls, "schedule", _vspec)
    q.undo()


def test_vspec_layer_copies_no_plugin_marker(world) -> None:
    cls, plugin = world
    plugin.install(cls, [])
    p = Patcher("t")
    wrapped = p.wrap(cls, "schedule", _vspec)
    try:
        assert not hasattr(wrapped, "_fake_marker")
        assert wrapped.__wrapped__ is not None and wrapped.__name__ == "schedule"
    finally:
        p.undo()


def test_host_function_looks_through_a_wrapper_without_wrapped(world) -> None:
    cls, plugin = world
    host_fn = cls.__dict__["schedule"]
    plugin.install(cls, [])
    p = Patcher("t")
    p.wrap(cls, "schedule", _vspec)
    try:
        found, foreign = host_function(cls.schedule, "schedule")
        assert found is host_fn
        assert [f.by for f in foreign] == ["fakeplugin"] and foreign[0].via == "closure"
    finally:
        p.undo()


def test_an_opaque_wrapper_hides_the_host(world) -> None:
    cls, _plugin = world

    class Opaque:
        def __call__(self, *a):  # type: ignore[no-untyped-def]
            return ["opaque"]

    cls.schedule = Opaque()
    found, _foreign = host_function(cls.schedule, "schedule")
    assert found is None
    assert chain(cls.schedule, "schedule")[-1].via == ""


def test_vspec_markers_from_the_factory_travel_with_the_layer(world) -> None:
    cls, _plugin = world

    def make(orig):  # type: ignore[no-untyped-def]
        def schedule(self, n):  # type: ignore[no-untyped-def]
            return orig(self, n)

        schedule.__vspec_backport__ = True
        schedule.unrelated = True
        return schedule

    p = Patcher("t")
    p.wrap(cls, "schedule", make)
    try:
        assert getattr(cls.schedule, "__vspec_backport__", False)
        assert not hasattr(cls.schedule, "unrelated")
    finally:
        p.undo()
    assert not hasattr(cls.schedule, "__vspec_backport__")
