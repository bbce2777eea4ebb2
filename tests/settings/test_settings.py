"""Settings: precedence of every source, legacy spellings and every validation error."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_hust_vspec.settings import (
    OPTIONS,
    Settings,
    SettingsError,
    load_settings,
    resolve_settings,
)


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_defaults_without_any_source() -> None:
    s = load_settings({})
    assert s == Settings()
    assert s.effective_gamma() == 4
    assert s.adaptive_speculation is True
    assert s.adaptive_policy == "online"


def test_mtp_default_gamma_is_6() -> None:
    assert load_settings({"HUST_VSPEC_METHOD": "mtp"}).effective_gamma() == 6


def test_precedence_preset_config_env_cli(tmp_path: Path) -> None:
    preset = write(tmp_path / "p.toml", '[serve]\ngamma = 2\nport = 1\nhost = "h-preset"\n'
                   'dtype = "float16"\n')
    config = write(tmp_path / "c.toml", "[serve]\ngamma = 3\nport = 2\nhost = \"h-config\"\n")
    env = {"VSPEC_CONFIG": config, "HUST_VSPEC_GAMMA": "5", "HUST_VSPEC_PORT": "3"}
    r = resolve_settings(preset=preset, env=env, cli={"gamma": 7})
    assert r.settings.gamma == 7  # CLI beats env
    assert r.settings.port == 3  # env beats config
    assert r.settings.host == "h-config"  # config beats preset
    assert r.settings.dtype == "float16"  # preset beats default
    assert r.origins["gamma"] == "flag --gamma"
    assert r.origins["port"] == "environment HUST_VSPEC_PORT"
    assert r.origins["host"].endswith("c.toml: [serve] host")


def test_config_flag_beats_vspec_config_env(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", "[serve]\ngamma = 2\n")
    b = write(tmp_path / "b.toml", "[serve]\ngamma = 3\n")
    assert resolve_settings(config=b, env={"VSPEC_CONFIG": a}).settings.gamma == 3


def test_legacy_env_prefixes_lose_to_new(tmp_path: Path) -> None:
    env = {"HUST_SPECSLO_GAMMA": "2", "HUST_SPECASCEND_PORT": "9", "HUST_SPECSLO_PORT": "8"}
    s = load_settings(env)
    assert s.gamma == 2
    assert s.port == 8  # SPECSLO is the newer legacy name, read above SPECASCEND
    env["HUST_VSPEC_GAMMA"] = "6"
    assert load_settings(env).gamma == 6


def test_legacy_config_files_lose_to_vspec_config(tmp_path: Path) -> None:
    old = write(tmp_path / "old.toml", "[serve]\ngamma = 2\nport = 5\n")
    older = write(tmp_path / "older.toml", "[serve]\ngamma = 1\nport = 4\nhost = \"x\"\n")
    new = write(tmp_path / "new.toml", "[serve]\ngamma = 3\n")
    s = load_settings({"SPECASCEND_CONFIG": older, "SPECSLO_CONFIG": old, "VSPEC_CONFIG": new})
    assert (s.gamma, s.port, s.host) == (3, 5, "x")


def test_method_aliases() -> None:
    assert load_settings({"HUST_VSPEC_METHOD": "draft_model"}).method == "draft"
    assert load_settings({"HUST_VSPEC_METHOD": "qwen3_5_mtp"}).method == "mtp"


def test_env_types_and_booleans() -> None:
    s = load_settings(
        {
            "HUST_VSPEC_ADAPTIVE_SPECULATION": "off",
            "HUST_VSPEC_PREFIX_CACHING": "yes",
            "HUST_VSPEC_ADAPTIVE_HYSTERESIS": "0.1",
            "HUST_VSPEC_EXTRA_ARGS": "--seed 3 --max-log-len '1 2'",
            "HUST_VSPEC_MAX_NUM_SEQS": "none",
        }
    )
    assert s.adaptive_speculation is False
    assert s.vllm["prefix_caching"] is True
    assert s.tuning("hysteresis") == pytest.approx(0.1)
    assert s.extra_args == ["--seed", "3", "--max-log-len", "1 2"]
    assert s.max_num_seqs is None


def test_env_table_is_collected(tmp_path: Path) -> None:
    p = write(tmp_path / "p.toml", "[serve]\ngamma = 2\n[env]\nFOO = 1\nBAR = \"x\"\n")
    r = resolve_settings(preset=p, env={})
    assert r.extra_env == {"FOO": "1", "BAR": "x"}


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[serve]\ngama = 2\n", "[serve] gama: unknown key (did you mean 'gamma'?)"),
        ("[server]\ngamma = 2\n", "unknown key or table 'server'"),
        ("[serve]\ngamma = \"two\"\n", "gamma must be an integer"),
        ("[serve]\ngamma = 0\n", "gamma=0 is below the minimum 1"),
        ("[serve]\nport = 70000\n", "port=70000 is above the maximum 65535"),
        ("[serve]\nmethod = \"medusa\"\n", "method='medusa' is not one of"),
        ("[serve]\nprefix_caching = \"maybe\"\n", "prefix_caching must be a boolean"),
        ("[serve]\nextra_args = [1]\n", "extra_args must be a list of strings"),
        ("[serve\n", "not valid TOML"),
    ],
)
def test_toml_errors_name_file_and_key(tmp_path: Path, toml: str, message: str) -> None:
    path = write(tmp_path / "bad.toml", toml)
    with pytest.raises(SettingsError) as err:
        resolve_settings(config=path, env={})
    assert message in str(err.value)
    assert "bad.toml" in str(err.value)


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="nope.toml"):
        load_settings({"VSPEC_CONFIG": str(tmp_path / "nope.toml")})


def test_unknown_vspec_env_is_an_error_but_legacy_unknown_is_ignored() -> None:
    with pytest.raises(SettingsError, match="HUST_VSPEC_GAMA: unknown vSpec option"):
        load_settings({"HUST_VSPEC_GAMA": "3"})
    assert load_settings({"HUST_SPECSLO_SOMETHING_OLD": "3"}) == Settings()
    # the plugin gate and model lookup variables are not options
    load_settings({"HUST_VSPEC_ENABLED": "1", "HUST_VSPEC_MODEL_DIR": "/x"})


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="environment HUST_VSPEC_PORT: port must be"):
        load_settings({"HUST_VSPEC_PORT": "eighty"})


def test_a_profile_alone_implies_the_profile_policy() -> None:
    resolved = resolve_settings(env={"HUST_VSPEC_ADAPTIVE_PROFILE": "p.json"})
    assert resolved.settings.adaptive_policy == "profile"
    assert "implied by adaptive_profile" in resolved.origins["adaptive_policy"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HUST_VSPEC_ADAPTIVE_PROFILE": "p.json", "HUST_VSPEC_ADAPTIVE_POLICY": "online"},
         "adaptive_policy is 'online'"),
        ({"HUST_VSPEC_ADAPTIVE_POLICY": "profile"}, "no adaptive_profile is given"),
        ({"HUST_VSPEC_ADAPTIVE_MIN_GAMMA": "5"}, "adaptive_min_gamma=5"),
        (
            {"HUST_VSPEC_EAGLE_RELAXED_ACCEPT_TOPK": "2"},
            "eagle_relaxed_accept_topk (environment HUST_VSPEC_EAGLE_RELAXED_ACCEPT_TOPK) needs",
        ),
        ({"HUST_VSPEC_CONFIDENCE_STOP_THRESHOLD": "1.0"}, "confidence_stop is off"),
        (
            {"HUST_VSPEC_DRAFT_TENSOR_PARALLEL_SIZE": "2"},
            "draft_tensor_parallel_size=2 is larger",
        ),
        (
            {"HUST_VSPEC_METHOD": "mtp", "HUST_VSPEC_DRAFT_MODEL": "x"},
            "uses no separate draft model",
        ),
    ],
)
def test_contradictions(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(env)
    assert message in str(err.value)


def test_relaxed_accept_with_eagle_is_fine_and_labelled() -> None:
    s = load_settings({"HUST_VSPEC_METHOD": "eagle", "HUST_VSPEC_EAGLE_RELAXED_ACCEPT_TOPK": "2"})
    assert s.relaxed_acceptance()


def test_every_option_has_three_spellings() -> None:
    for opt in OPTIONS:
        assert opt.flag == "--" + opt.name.replace("_", "-")
        assert opt.env == "HUST_VSPEC_" + opt.name.upper()
        assert opt.help


def test_non_defaults_round_trip_through_env() -> None:
    from vllm_hust_vspec.settings import render_env_value

    s = load_settings(
        {
            "HUST_VSPEC_METHOD": "eagle",
            "HUST_VSPEC_EXTRA_ARGS": "--a 'b c'",
            "HUST_VSPEC_ADAPTIVE_SPECULATION": "0",
            "HUST_VSPEC_PREFIX_CACHING": "0",
        }
    )
    env = {f"HUST_VSPEC_{k.upper()}": render_env_value(v) for k, v in s.non_defaults().items()}
    assert load_settings(env) == s
