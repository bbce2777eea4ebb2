"""A neutral description of host classes and functions, built from ``ast`` (static tier) or
from imported objects (live tier), so one evaluator answers both tiers' probes."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class FuncInfo:
    """What a check may ask about one function or method."""

    name: str
    params: tuple[str, ...]
    var_keyword: bool = False
    # Parameters a call may fill by position (``self`` included); None when there is
    # ``*args`` or it is unknown.
    num_positional: int | None = None
    # (callee simple name, keyword names) for every call in the body.
    calls: tuple[tuple[str, frozenset[str]], ...] = ()
    # Identifiers and attribute names the body mentions.
    names: frozenset[str] = frozenset()
    # ``self.<name>`` assignment targets in the body.
    self_attrs: frozenset[str] = frozenset()
    # (callee simple name, positional argument count, keyword names, has */** arguments)
    # for every call: whether a call fits the callee's signature (different code lines).
    call_shapes: tuple[tuple[str, int, frozenset[str], bool], ...] = ()


@dataclass(frozen=True)
class ClassInfo:
    """What a check may ask about one class (its own members, not inherited ones)."""

    module: str
    name: str
    # Direct bases as (module or None when unresolvable, simple name).
    bases: tuple[tuple[str | None, str], ...]
    methods: dict[str, FuncInfo] = field(default_factory=dict)
    # Class-level annotated or assigned names (dataclass fields, class attributes).
    fields: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """``module.Name``."""
        return f"{self.module}.{self.name}"


class Resolver(Protocol):
    """Answers "does the host have X" for one tier."""

    def has_package(self, package: str) -> bool:
        """True when the top-level host package is available to this tier."""

    def has_module(self, module: str) -> bool:
        """True when the module exists."""

    def get_class(self, module: str, name: str) -> ClassInfo | None:
        """The class ``module.name`` (following re-exports), or None."""

    def get_function(self, module: str, name: str) -> FuncInfo | None:
        """The module-level function ``module.name`` (following re-exports), or None."""


def _params(args: ast.arguments) -> tuple[tuple[str, ...], bool]:
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return tuple(names), args.kwarg is not None


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    if isinstance(node.func, ast.Name):
        return node.func.id
    # partial(self._propose, ...) and similar indirections are not followed on purpose: the
    # checks name direct calls, which is how the hosts read today.
    return None


def _self_target(node: ast.expr) -> str | None:
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "self"):
        return node.attr
    return None


def func_from_ast(node: ast.FunctionDef | ast.AsyncFunctionDef) -> FuncInfo:
    """Describe a function definition."""
    params, var_kw = _params(node.args)
    num_positional = (None if node.args.vararg is not None
                      else len(node.args.posonlyargs) + len(node.args.args))
    calls: list[tuple[str, frozenset[str]]] = []
    shapes: list[tuple[str, int, frozenset[str], bool]] = []
    names: set[str] = set()
    attrs: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            callee = _callee(sub)
            if callee:
                keywords = frozenset(k.arg for k in sub.keywords if k.arg)
                calls.append((callee, keywords))
                starred = any(isinstance(a, ast.Starred) for a in sub.args) or any(
                    k.arg is None for k in sub.keywords)
                positional = sum(1 for a in sub.args if not isinstance(a, ast.Starred))
                shapes.append((callee, positional, keywords, starred))
        elif isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.add(sub.attr)
        if isinstance(sub, ast.Assign):
            targets: list[ast.expr] = list(sub.targets)
        elif isinstance(sub, ast.AnnAssign | ast.AugAssign):
            targets = [sub.target]
        else:
            continue
        for target in targets:
            elts = target.elts if isinstance(target, ast.Tuple) else [target]
            for elt in elts:
                attr = _self_target(elt)
                if attr:
                    attrs.add(attr)
    return FuncInfo(
        name=node.name, params=params, var_keyword=var_kw, num_positional=num_positional,
        calls=tuple(calls),
        names=frozenset(names), self_attrs=frozenset(attrs), call_shapes=tuple(shapes),
    )


def class_members(node: ast.ClassDef) -> tuple[dict[str, FuncInfo], frozenset[str]]:
    """Methods and class-level names of a class definition."""
    methods: dict[str, FuncInfo] = {}
    fields: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            methods[stmt.name] = func_from_ast(stmt)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            fields.add(stmt.target.id)
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    fields.add(t.id)
    return methods, frozenset(fields)


def linearize(resolver: Resolver, cls: ClassInfo, _depth: int = 0) -> list[ClassInfo]:
    """The class and its resolvable ancestors in C3 (Python MRO) order.

    Bases the resolver cannot find (``object``, ``nn.Module``, typing constructs) are left
    out; they hold nothing the checks ask about.
    """
    if _depth > 40:
        return [cls]
    parents: list[ClassInfo] = []
    for module, name in cls.bases:
        if module is None:
            continue
        base = resolver.get_class(module, name)
        if base is not None:
            parents.append(base)
    seqs = [linearize(resolver, p, _depth + 1) for p in parents] + [parents]
    out = [cls]
    seqs = [list(s) for s in seqs if s]
    while seqs:
        for seq in seqs:
            head = seq[0]
            if not any(head.label == c.label for s in seqs for c in s[1:]):
                break
        else:
            # Inconsistent hierarchy (cannot happen in importable code): keep DFS order.
            head = seqs[0][0]
        out.append(head)
        seqs = [[c for c in s if c.label != head.label] for s in seqs]
        seqs = [s for s in seqs if s]
    return out


__all__ = ["ClassInfo", "FuncInfo", "Resolver", "class_members", "func_from_ast", "linearize"]
