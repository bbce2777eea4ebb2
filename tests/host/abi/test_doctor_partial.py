"""The doctor's reading of partial source trees and of calls across code lines, on small
hand-written trees (nothing imported from a host)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from vllm_hust_vspec.host import abi
from vllm_hust_vspec.host.abi import live
from vllm_hust_vspec.host.abi.evaluate import run_check
from vllm_hust_vspec.host.abi.info import func_from_ast
from vllm_hust_vspec.host.abi.model import CALL_FITS, METHOD, Check, Probe
from vllm_hust_vspec.host.abi.source import StaticResolver, sources_from_path

RUNNER = """
    class Sampler:
        def __init__(self, sampler, config=None): ...
    class Wrapper:
        def __init__(self, runnable, **options): ...
    class Runner:
        def build(self, args):
            Sampler(1, 2)
            Sampler(1, 2, 3)
            Wrapper(self, update_stream=None)
            Sampler(*args)
        def build_kw(self):
            Sampler(1, device=None)
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def _resolver(root: Path) -> StaticResolver:
    return StaticResolver(sources_from_path(root, abi.HOSTS))


@pytest.mark.parametrize("complete", [False, True])
def test_absent_module_is_unread_only_in_a_partial_tree(tmp_path: Path, complete: bool) -> None:
    files = {"vllm_ascend/sample/rejection_sampler.py": "X = 1\n"}
    if complete:
        files["vllm_ascend/__init__.py"] = ""
    root = _write(tmp_path, files)
    report = abi.check_static("draft", False, sources=[str(root)], use_installed=False)
    assert report.host("vllm_ascend").partial is not complete
    result = {r.check.id: r for t in report.tiers for r in t.results}["ascend.proposer_class"]
    if complete:
        assert result.status == "FAIL" and not result.unread
        assert not report.ok
    else:
        assert result.status == "UNREAD"
        assert result.unread == ("module vllm_ascend.spec_decode.draft_proposer",
                                 "module vllm_ascend.spec_decode.llm_base_proposer")
        assert result not in report.tiers[0].failed


def test_a_variant_past_an_unread_one_is_not_taken(tmp_path: Path) -> None:
    """Which alternative the host matches is undecided when an earlier one needs a file the
    tree lacks; a plain requirement is met by any alternative found."""
    root = _write(tmp_path, {"vllm_ascend/a.py": "class A:\n    def f(self): ...\n"})
    present = Probe(kind=METHOD, module="vllm_ascend.a", cls="A", name="f")
    absent = Probe(kind=METHOD, module="vllm_ascend.b", cls="B", name="f")
    resolver = _resolver(root)
    with_variants = Check(id="x", host="vllm_ascend", why="w",
                          alternatives=((absent,), (present,)), variants=("b", "a"))
    result = run_check(resolver, with_variants)
    assert result.status == "UNREAD" and result.variant is None
    plain = Check(id="y", host="vllm_ascend", why="w", alternatives=((absent,), (present,)))
    assert run_check(resolver, plain).status == "PASS"
    fact = Check.fact_of("z", "vllm_ascend", "w", ("a", (present,)), ("none", ()))
    assert run_check(resolver, fact).status == "FACT"
    assert run_check(resolver, fact).variant == "a"


def _fits(method: str, callee: str, target: str) -> Probe:
    return Probe(kind=CALL_FITS, module="vllm_ascend.r", cls="Runner", name=method,
                 params=("vllm_ascend.r", target, "__init__"), callee=callee)


def test_call_fits_counts_positionals_and_keywords(tmp_path: Path) -> None:
    resolver = _resolver(_write(tmp_path, {"vllm_ascend/r.py": RUNNER}))
    result = run_check(resolver, Check.of("c", "vllm_ascend", "w",
                                          _fits("build", "Sampler", "Sampler")))
    # Sampler(1, 2) fits, Sampler(*args) cannot be counted; Sampler(1, 2, 3) does not fit.
    assert result.status == "FAIL"
    assert result.missing == ("a fitting call: Runner.build passes vllm_ascend.r.Sampler."
                              "__init__ 3 positional arguments, where it takes 2 "
                              "(sampler, config)",)
    # **options takes any keyword.
    assert run_check(resolver, Check.of("c", "vllm_ascend", "w",
                                        _fits("build", "Wrapper", "Wrapper"))).passed
    keyword = run_check(resolver, Check.of("c", "vllm_ascend", "w",
                                           _fits("build_kw", "Sampler", "Sampler")))
    assert keyword.missing and "keyword device=" in keyword.missing[0]


def test_both_tiers_count_positional_parameters_alike() -> None:
    source = "def f(self, a, b=1, *, c): ...\ndef g(self, *args, c=0): ...\n"
    tree = ast.parse(source)
    space: dict[str, object] = {}
    exec(compile(source, "<test>", "exec"), space)  # noqa: S102 - the test's own text
    for node in tree.body:
        assert isinstance(node, ast.FunctionDef)
        static = func_from_ast(node)
        imported = live._func_info(node.name, space[node.name])
        assert imported is not None
        assert static.num_positional == imported.num_positional
    assert func_from_ast(tree.body[0]).num_positional == 3  # type: ignore[arg-type]
    assert func_from_ast(tree.body[1]).num_positional is None  # type: ignore[arg-type]


def test_two_partial_trees_read_as_one(tmp_path: Path) -> None:
    first = _write(tmp_path / "one", {"vllm_ascend/a.py": "A = 1\n"})
    second = _write(tmp_path / "two", {"vllm_ascend/a.py": "B = 1\n",
                                       "vllm_ascend/b.py": "class B: ...\n"})
    report = abi.check_static("draft", False, sources=[str(first), str(second)],
                              use_installed=False)
    host = report.host("vllm_ascend")
    assert host.partial and str(first) in host.location and str(second) in host.location
