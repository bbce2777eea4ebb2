"""The one table of 0.14.3's option names (settings/legacy.py): every row names a canonical
option or fails closed, every old name is read in its three spellings, and docs/migration.md
lists exactly the table."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from vllm_hust_vspec.cli.launch import build_parser
from vllm_hust_vspec.cli.options import cli_values
from vllm_hust_vspec.settings import OPTIONS_BY_NAME, resolve_settings
from vllm_hust_vspec.settings.fields import TABLES, TUNING
from vllm_hust_vspec.settings.legacy import LEGACY, LEGACY_BY_NAME, migration_markdown

ROOT = Path(__file__).resolve().parents[2]


def _script() -> object:
    spec = importlib.util.spec_from_file_location(
        "release_check", ROOT / "scripts" / "release_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_migration_doc_is_generated_from_the_table() -> None:
    script = _script()
    text = (ROOT / "docs" / "migration.md").read_text()
    fresh = script.render_table(text, "legacy", migration_markdown())  # type: ignore[attr-defined]
    assert fresh == text, "run scripts/release_check.py tables"
    for row in LEGACY:
        assert f"`{row.flag}`" in migration_markdown()


def test_rows_are_old_names_of_canonical_options() -> None:
    assert len(LEGACY_BY_NAME) == len(LEGACY)
    for row in LEGACY:
        assert row.old not in OPTIONS_BY_NAME, row.old
        assert row.new is None or row.new in OPTIONS_BY_NAME, row.new
        assert row.note


@pytest.mark.parametrize("row", [r for r in LEGACY if r.new is not None], ids=lambda r: r.old)
def test_every_mapped_name_is_read_in_three_spellings(row: object, tmp_path: Path) -> None:
    from vllm_hust_vspec.settings.legacy import Legacy

    assert isinstance(row, Legacy) and row.new is not None
    kind = row.read_kind()
    tuning = TUNING.get(row.old.removeprefix("adaptive_")) if row.new == "adaptive_tuning" else None
    low = int(TABLES[row.new][row.key].minimum or 0) if row.key else 0  # e.g. max_model_len
    sample = {"int": "2" if tuning else str(max(3, low)), "float": "0.5"}.get(kind)
    if row.key and TABLES[row.new][row.key].choices:
        tuning = TABLES[row.new][row.key]
    if tuning is not None and tuning.choices:
        sample = tuning.choices[-1]
        raw, toml, argv = sample, f'"{sample}"', [row.flag, sample]
    elif sample is not None:
        raw, toml, argv = sample, sample, [row.flag, sample]
    else:
        raw, toml, argv = {
            "bool": (("1", "true", [row.flag])
                     if OPTIONS_BY_NAME[row.new].default is False or row.fallback
                     else ("0", "false", ["--no-" + row.flag[2:]])),
            "str": ("w8a16" if "quant" in row.old else "/ids.json",
                    '"w8a16"' if "quant" in row.old else '"/ids.json"',
                    [row.flag, "w8a16" if "quant" in row.old else "/ids.json"]),
        }[kind]
    if row.new.startswith("confidence_stop") and row.new != "confidence_stop":
        argv = [*argv, "--confidence-stop"]  # the stop's knobs need the stop
        toml += "\nconfidence_stop = true"
    base = {"method": "eagle"}
    ns = build_parser().parse_args(["--method", "eagle", *argv])
    stop = ({"HUST_VSPEC_CONFIDENCE_STOP": "1"} if "--confidence-stop" in argv
            and row.new != "confidence_stop" else {})
    got = [resolve_settings(cli=cli_values(ns), env={}),
           resolve_settings(env={"HUST_VSPEC_METHOD": "eagle", **stop,
                                 "HUST_VSPEC_" + row.old.upper(): raw})]
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[serve]\nmethod = "eagle"\n{row.old} = {toml}\n')
    got.append(resolve_settings(config=str(cfg), env={}))
    values = {json.dumps(getattr(r.settings, row.new), sort_keys=True) for r in got}
    assert len(values) == 1
    assert values != {json.dumps(getattr(resolve_settings(cli=base, env={}).settings, row.new),
                                 sort_keys=True)}
