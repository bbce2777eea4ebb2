"""The one patch utility: records, refuses double patches, undoes, fails closed."""

from __future__ import annotations

import types

import pytest

from vllm_hust_vspec.host.patching import (
    Patcher,
    PatchError,
    is_patched,
    original_of,
    resolve,
)


class Base:
    def hello(self) -> str:
        return "base"

    @staticmethod
    def static() -> str:
        return "static"


class Child(Base):
    def own(self) -> str:
        return "own"


def test_wrap_calls_original_and_undo_restores_exact_object() -> None:
    before = Child.__dict__["own"]
    p = Patcher("t")
    p.wrap(Child, "own", lambda orig: lambda self: "wrapped:" + orig(self))
    assert Child().own() == "wrapped:own"
    assert is_patched(Child, "own")
    assert Child.own.__name__ == "own"
    assert Child.own.__vspec_original__ is before  # type: ignore[attr-defined]
    p.undo()
    assert Child.__dict__["own"] is before
    assert Child().own() == "own"
    assert not is_patched(Child, "own")


def test_inherited_attribute_is_removed_again_on_undo() -> None:
    p = Patcher("t")
    p.wrap(Child, "hello", lambda orig: lambda self: "child:" + orig(self))
    assert Child().hello() == "child:base"
    assert Base().hello() == "base"
    assert original_of(Child, "hello") is Base.__dict__["hello"]
    p.undo()
    assert "hello" not in Child.__dict__
    assert Child().hello() == "base"


def test_staticmethod_descriptor_survives_undo() -> None:
    raw = Base.__dict__["static"]
    p = Patcher("t")
    p.patch(Base, "static", staticmethod(lambda: "patched"))
    assert Base.static() == "patched"
    p.undo()
    assert Base.__dict__["static"] is raw
    assert Base.static() == "static"


def test_refuses_to_patch_the_same_attribute_twice_across_patchers() -> None:
    a, b = Patcher("a"), Patcher("b")
    a.patch(Child, "own", lambda self: 1)
    try:
        with pytest.raises(PatchError, match=r"Child\.own is already patched"):
            b.patch(Child, "own", lambda self: 2)
        with pytest.raises(PatchError, match="already patched"):
            a.patch(Child, "own", lambda self: 3)
        assert Child().own() == 1
    finally:
        a.undo()
    # After undo the attribute can be patched again.
    b.patch(Child, "own", lambda self: 4)
    assert Child().own() == 4
    b.undo()
    assert Child().own() == "own"


def test_missing_attribute_fails_closed_naming_class_and_attribute() -> None:
    p = Patcher("t")
    with pytest.raises(PatchError, match=r"test_patching\.Child\.nope"):
        p.patch(Child, "nope", lambda self: 0)
    with pytest.raises(PatchError, match=r"Child\.nope"):
        p.wrap(Child, "nope", lambda orig: orig)
    assert len(p) == 0
    assert not hasattr(Child, "nope")


def test_create_allows_new_attribute_and_undo_deletes_it() -> None:
    p = Patcher("t")
    assert p.patch(Child, "extra", 5, create=True) is None
    assert Child.extra == 5  # type: ignore[attr-defined]
    p.undo()
    assert not hasattr(Child, "extra")


def test_undo_is_reverse_order_and_idempotent() -> None:
    mod = types.SimpleNamespace(value=1)
    p = Patcher("t")
    p.patch(mod, "value", 2)
    with pytest.raises(PatchError):
        p.patch(mod, "value", 3)
    p.patch(Child, "own", lambda self: "x")
    assert [r.name for r in p.records] == ["value", "own"]
    p.undo()
    p.undo()
    assert mod.value == 1
    assert Child().own() == "own"


def test_undo_leaves_a_foreign_replacement_in_place() -> None:
    # Another plugin replaced vSpec's patch: undoing vSpec must not erase theirs.
    before = Child.__dict__["own"]
    p = Patcher("t")
    p.patch(Child, "own", lambda self: "mine")
    Child.own = lambda self: "theirs"  # type: ignore[method-assign]
    try:
        p.undo()
        assert Child().own() == "theirs"
        assert not is_patched(Child, "own")
    finally:
        Child.own = before  # type: ignore[method-assign]


def test_resolve_names_the_missing_piece() -> None:
    assert resolve("json", "JSONDecoder.decode") is __import__("json").JSONDecoder.decode
    with pytest.raises(PatchError, match=r"json\.NoSuchClass"):
        resolve("json", "NoSuchClass.x")
    with pytest.raises(PatchError, match="no_such_module_vspec"):
        resolve("no_such_module_vspec", "X")


def test_original_of_unpatched_is_an_error() -> None:
    with pytest.raises(PatchError, match="not patched"):
        original_of(Child, "own")
