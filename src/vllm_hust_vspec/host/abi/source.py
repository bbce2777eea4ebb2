"""The static tier's view of a host: its Python source, read with ``ast``, never imported.

A source can be an installed package (located with ``importlib.util.find_spec`` on the
top-level name, which does not execute the package), a source checkout, a package
directory, or an sdist tarball (read in memory). A checkout whose package directory has no
``__init__.py`` is a partial tree (some of the package's files, saved for reading): what it
lacks is "not in this source", never "missing from the host".
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vllm_hust_vspec.host.abi.info import ClassInfo, FuncInfo, class_members, func_from_ast


class SourceError(ValueError):
    """A --source path that holds no host package."""


@dataclass
class PackageSource:
    """Where one host package's files come from."""

    package: str
    kind: str  # "installed" | "source tree" | "sdist" | "wheel"
    location: str  # package directory, or "<tarball>!<member prefix>"
    root: str  # checkout / sdist root (for version and git lookups)
    loaders: dict[str, Callable[[], str]]  # module name -> source text
    version_hint: str | None = None  # from PKG-INFO / _version.py when read
    partial: bool = False  # a tree holding only some of the package's modules
    note: str | None = None  # what the checkout says about itself (verified core commit)


def _module_name(package: str, rel: Path) -> str:
    parts = [package, *rel.with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _from_directory(package: str, pkg_dir: Path, kind: str, root: Path) -> PackageSource:
    loaders: dict[str, Callable[[], str]] = {}
    for path in sorted(pkg_dir.rglob("*.py")):
        rel = path.relative_to(pkg_dir)
        if any(part in ("tests", "__pycache__") for part in rel.parts[:-1]):
            continue
        loaders[_module_name(package, rel)] = functools.partial(_read, path)
    partial = not (pkg_dir / "__init__.py").is_file()
    return PackageSource(package, kind, str(pkg_dir), str(root), loaders,
                         _version_from_root(root, package), partial=partial,
                         note=_checkout_note(root) if kind != "installed" else None)


# vllm-ascend checkouts record the vLLM commit their main branch is verified with here.
VERIFIED_CORE_FILE = Path(".github") / "vllm-main-verified.commit"


def _checkout_note(root: Path) -> str | None:
    path = root / VERIFIED_CORE_FILE
    if not path.is_file():
        return None
    commit = path.read_text(errors="replace").strip()
    return f"verified with vLLM commit {commit} ({VERIFIED_CORE_FILE})" if commit else None


def _is_partial_package(path: Path) -> bool:
    """A package directory without ``__init__.py`` that still holds Python modules."""
    return path.is_dir() and not (path / "__init__.py").is_file() and any(path.rglob("*.py"))


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _version_from_root(root: Path, package: str) -> str | None:
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        for line in pkg_info.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return _version_from_text(root / package / "_version.py")


def _version_from_text(path: Path) -> str | None:
    if not path.is_file():
        return None
    return _version_in_source(path.read_text(errors="replace"))


def _version_in_source(text: str) -> str | None:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if names & {"__version__", "version"} and isinstance(stmt.value, ast.Constant):
                return str(stmt.value.value)
    return None


class _Archive:
    """The regular files of an sdist (tar) or a wheel (zip), read lazily by name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        self._tar: tarfile.TarFile | None = None
        if zipfile.is_zipfile(path):
            self._zip = zipfile.ZipFile(path)
            self.names = [n for n in self._zip.namelist() if not n.endswith("/")]
            self.kind = "wheel"
        else:
            self._tar = tarfile.open(path, "r:*")  # noqa: SIM115 (closed by close())
            self._members = {m.name: m for m in self._tar.getmembers() if m.isfile()}
            self.names = list(self._members)
            self.kind = "sdist"

    def read(self, name: str) -> str:
        if self._zip is not None:
            return self._zip.read(name).decode("utf-8", "replace")
        assert self._tar is not None
        f = self._tar.extractfile(self._members[name])
        return f.read().decode("utf-8", "replace") if f is not None else ""

    def close(self) -> None:
        for handle in (self._zip, self._tar):
            if handle is not None:
                handle.close()


def _from_archive(path: Path, packages: tuple[str, ...]) -> list[PackageSource]:
    archive = _Archive(path)
    try:
        return _packages_in(archive, packages)
    finally:
        archive.close()


def _archive_version(archive: _Archive, root_prefix: str) -> str | None:
    """The Version: line of the sdist's PKG-INFO or the wheel's dist-info METADATA."""
    names = [f"{root_prefix}PKG-INFO"] if archive.kind == "sdist" else [
        n for n in archive.names if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
    for name in names:
        if name in archive.names:
            for line in archive.read(name).splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return None


def _packages_in(archive: _Archive, packages: tuple[str, ...]) -> list[PackageSource]:
    out = []
    for package in packages:
        inits = sorted(
            (n for n in archive.names if n.endswith(f"/{package}/__init__.py")
             or n == f"{package}/__init__.py"),
            key=len,
        )
        if not inits:
            continue
        prefix = inits[0][: -len("__init__.py")]
        texts: dict[str, str] = {}
        for name in archive.names:
            if name.startswith(prefix) and name.endswith(".py"):
                rel = Path(name[len(prefix):])
                if any(p in ("tests", "__pycache__") for p in rel.parts[:-1]):
                    continue
                texts[_module_name(package, rel)] = archive.read(name)
        version = _archive_version(archive, prefix[: -len(f"{package}/")])
        loaders: dict[str, Callable[[], str]] = {
            m: functools.partial(str, t)
            for m, t in texts.items()
            if m == package or m.startswith(package + ".")
        }
        out.append(PackageSource(package, archive.kind, f"{archive.path}!{prefix}",
                                 str(archive.path), loaders, version))
    return out


def sources_from_path(path: str | Path, packages: tuple[str, ...]) -> list[PackageSource]:
    """Host packages found at ``path`` (sdist, wheel, checkout root, ``src/`` layout or package
    dir).

    Raises :class:`SourceError` naming the path when none of ``packages`` is there.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise SourceError(f"--source {path}: no such file or directory")
    if p.is_file():
        is_sdist = p.name.endswith((".tar.gz", ".tgz", ".tar")) and tarfile.is_tarfile(p)
        is_wheel = p.name.endswith(".whl") and zipfile.is_zipfile(p)
        if not (is_sdist or is_wheel):
            raise SourceError(f"--source {path}: not a directory, an sdist tarball or a wheel")
        found = _from_archive(p, packages)
    elif p.name in packages and ((p / "__init__.py").is_file() or _is_partial_package(p)):
        found = [_from_directory(p.name, p, "source tree", p.parent)]
    else:
        found = []
        for package in packages:
            for cand in (p / package, p / "src" / package):
                if (cand / "__init__.py").is_file() or _is_partial_package(cand):
                    found.append(_from_directory(package, cand, "source tree", cand.parent))
                    break
    if not found:
        raise SourceError(
            f"--source {path}: holds none of the host packages {', '.join(packages)} "
            f"(give an sdist, a checkout root or the package directory)"
        )
    return found


def overlay(first: PackageSource, second: PackageSource) -> PackageSource:
    """One package read from two partial trees (e.g. a fork's files and a proposer saved from
    elsewhere): modules of ``first`` win; partial unless either side is complete."""
    loaders = dict(second.loaders)
    loaders.update(first.loaders)
    return PackageSource(
        first.package, first.kind, f"{first.location} + {second.location}", first.root,
        loaders, first.version_hint or second.version_hint,
        partial=first.partial and second.partial, note=first.note or second.note)


def installed_source(package: str) -> PackageSource | None:
    """The installed package's source, located without importing it (None when absent)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    src = _from_directory(package, pkg_dir, "installed", pkg_dir.parent)
    src.version_hint = None  # installed versions come from distribution metadata
    return src


class StaticResolver:
    """Answers probes from parsed source files of the host packages."""

    def __init__(self, sources: list[PackageSource]) -> None:
        self._loaders: dict[str, Callable[[], str]] = {}
        self._packages = {s.package for s in sources}
        self._partial = {s.package for s in sources if s.partial}
        for s in sources:
            self._loaders.update(s.loaders)
        self._trees: dict[str, ast.Module | None] = {}
        self._classes: dict[tuple[str, str], ClassInfo | None] = {}
        self._import_tables: dict[str, dict[str, tuple[str, str | None]]] = {}

    def has_package(self, package: str) -> bool:
        return package in self._packages

    def has_module(self, module: str) -> bool:
        return module in self._loaders

    def not_in_source(self, module: str) -> bool:
        """True when ``module`` belongs to a partial source that does not hold it."""
        return module.split(".")[0] in self._partial and module not in self._loaders

    def _tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            loader = self._loaders.get(module)
            try:
                self._trees[module] = ast.parse(loader()) if loader else None
            except SyntaxError:
                self._trees[module] = None
        return self._trees[module]

    @staticmethod
    def _top_level(tree: ast.Module) -> list[ast.stmt]:
        # Definitions guarded by version checks or try/except still count.
        out: list[ast.stmt] = []
        todo = list(tree.body)
        while todo:
            stmt = todo.pop(0)
            out.append(stmt)
            if isinstance(stmt, ast.If):
                todo.extend(stmt.body + stmt.orelse)
            elif isinstance(stmt, ast.Try):
                todo.extend(stmt.body + stmt.orelse + stmt.finalbody)
                for h in stmt.handlers:
                    todo.extend(h.body)
        return out

    def _imports(self, module: str) -> dict[str, tuple[str, str | None]]:
        """Local name -> (module, attribute or None for a module alias)."""
        cached = self._import_tables.get(module)
        if cached is not None:
            return cached
        tree = self._tree(module)
        out: dict[str, tuple[str, str | None]] = {}
        self._import_tables[module] = out
        if tree is None:
            return out
        is_pkg = self._is_package(module)
        for stmt in self._top_level(tree):
            if isinstance(stmt, ast.ImportFrom):
                base = stmt.module or ""
                if stmt.level:
                    parts = module.split(".")
                    keep = len(parts) - stmt.level + (1 if is_pkg else 0)
                    base = ".".join(parts[:keep] + ([base] if base else []))
                for alias in stmt.names:
                    out[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        out[alias.asname] = (alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        out[top] = (top, None)
        return out

    def _is_package(self, module: str) -> bool:
        prefix = module + "."
        return any(m.startswith(prefix) for m in self._loaders)

    def _resolve_expr(self, module: str, expr: ast.expr) -> tuple[str | None, str] | None:
        imports = self._imports(module)
        if isinstance(expr, ast.Name):
            if expr.id in imports:
                mod, attr = imports[expr.id]
                return (mod, attr) if attr else None
            return (module, expr.id)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            head = imports.get(expr.value.id)
            if head and head[1] is None:
                return (head[0], expr.attr)
            if head and head[1] is not None:
                return (f"{head[0]}.{head[1]}", expr.attr)
            return (None, expr.attr)
        return None

    def _find(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.stmt] | None:
        tree = self._tree(module)
        if tree is None or depth > 8:
            # A submodule imported by name from its package: `from pkg import sub`.
            return None
        for stmt in self._top_level(tree):
            if (isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                    and stmt.name == name):
                return module, stmt
        target = self._imports(module).get(name)
        if target and target[1] is not None:
            return self._find(target[0], target[1], depth + 1)
        return None

    def get_class(self, module: str, name: str) -> ClassInfo | None:
        key = (module, name)
        if key not in self._classes:
            found = self._find(module, name)
            info = None
            if found and isinstance(found[1], ast.ClassDef):
                where, node = found
                assert isinstance(node, ast.ClassDef)
                bases = []
                for b in node.bases:
                    r = self._resolve_expr(where, b)
                    if r is not None:
                        bases.append(r)
                methods, fields = class_members(node)
                info = ClassInfo(where, node.name, tuple(bases), methods, fields)
            self._classes[key] = info
        return self._classes[key]

    def get_function(self, module: str, name: str) -> FuncInfo | None:
        found = self._find(module, name)
        if found and isinstance(found[1], ast.FunctionDef | ast.AsyncFunctionDef):
            return func_from_ast(found[1])
        return None


__all__ = [
    "PackageSource",
    "SourceError",
    "StaticResolver",
    "installed_source",
    "overlay",
    "sources_from_path",
]
