"""The live tier's view of a host: imported modules, ``hasattr`` and ``inspect.signature``.

Only used when the host imports in this process (the plugin inside vLLM, or the doctor on a
machine where vLLM/vllm-ascend import). Method bodies (for the call/source probes) are read
with ``inspect.getsource`` of the host's own function: the probes look through vSpec's layers
and other plugins' wrappers (``__wrapped__``, or the function a wrapper closes over), and
where a wrapper hides the host's function entirely they read the host's installed source
file statically. :attr:`LiveResolver.looked_through` says where they had to.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
from typing import Any

from vllm_hust_vspec.host.abi.info import ClassInfo, FuncInfo, func_from_ast
from vllm_hust_vspec.host.patching import HOST_PACKAGES, host_function


def _func_info(name: str, fn: Any) -> FuncInfo | None:
    target = inspect.unwrap(fn)
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    params = tuple(
        p.name for p in sig.parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    )
    var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    # inspect.signature of a plain function keeps ``self``, as the static tier counts it.
    positional = [p for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    num_positional = (None if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
                      else len(positional))
    body: FuncInfo | None = None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
        node = tree.body[0]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = func_from_ast(node)
    except (OSError, TypeError, SyntaxError, IndexError):
        body = None
    return FuncInfo(
        name=name, params=params, var_keyword=var_kw, num_positional=num_positional,
        calls=body.calls if body else (), names=body.names if body else frozenset(),
        self_attrs=body.self_attrs if body else frozenset(),
        call_shapes=body.call_shapes if body else (),
    )


class LiveResolver:
    """Answers probes from the imported host."""

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}
        self._classes: dict[tuple[str, str], ClassInfo | None] = {}
        # "module.Class.method: how" for every probe that had to look through a wrapper
        # another plugin installed.
        self.looked_through: list[str] = []
        self._static: dict[str, Any] = {}

    def _host_view(self, label: str, attr: str, fn: Any) -> Any:
        """``fn`` itself, or the host's function under other plugins' wrappers (noted); None
        when a wrapper hides it (the caller reads the source statically)."""
        if label.partition(".")[0] not in HOST_PACKAGES:
            return fn  # a library's class (torch.nn.Module): its own functions, not a host's
        found, foreign = host_function(fn, attr)
        if foreign:
            hidden = found is None
            how = ", ".join(f"{layer.by}'s wrapper (via {layer.via or 'nothing: opaque'})"
                            for layer in foreign)
            tail = "; read the host's source file instead" if hidden else ""
            self.looked_through.append(f"{label}: looked through {how}{tail}")
        return found if found is not None else (None if foreign else fn)

    def _static_method(self, module: str, cls: str, attr: str) -> FuncInfo | None:
        from vllm_hust_vspec.host.abi.source import StaticResolver, installed_source

        package = module.partition(".")[0]
        if package not in self._static:
            src = installed_source(package)
            self._static[package] = StaticResolver([src]) if src is not None else None
        resolver = self._static[package]
        info = resolver.get_class(module, cls) if resolver is not None else None
        return info.methods.get(attr) if info is not None else None

    def _import(self, module: str) -> Any:
        try:
            return importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure means "absent" here
            self.errors.setdefault(module, f"{type(exc).__name__}: {exc}")
            return None

    def has_package(self, package: str) -> bool:
        return self._import(package) is not None

    def has_module(self, module: str) -> bool:
        return self._import(module) is not None

    def get_class(self, module: str, name: str) -> ClassInfo | None:
        key = (module, name)
        if key in self._classes:
            return self._classes[key]
        mod = self._import(module)
        cls = getattr(mod, name, None) if mod is not None else None
        info = None
        if inspect.isclass(cls):
            methods: dict[str, FuncInfo] = {}
            for attr, value in vars(cls).items():
                fn = value.__func__ if isinstance(value, staticmethod | classmethod) else value
                if isinstance(value, property) and value.fget is not None:
                    fn = value.fget  # a property is a method in the static tier's view too
                if inspect.isfunction(fn) or inspect.isfunction(inspect.unwrap(fn)):
                    seen = self._host_view(f"{module}.{name}.{attr}", attr, fn)
                    fi = (_func_info(attr, seen) if seen is not None
                          else self._static_method(module, name, attr))
                    if fi is not None:
                        methods[attr] = fi
            fields = set(vars(cls).get("__annotations__", {}))
            if dataclasses.is_dataclass(cls):
                fields |= {f.name for f in dataclasses.fields(cls)}
            fields |= {k for k, v in vars(cls).items() if not callable(v)}
            bases = tuple((b.__module__, b.__name__) for b in cls.__bases__ if b is not object)
            info = ClassInfo(cls.__module__, cls.__name__, bases, methods, frozenset(fields))
        self._classes[key] = info
        return info

    def get_function(self, module: str, name: str) -> FuncInfo | None:
        mod = self._import(module)
        fn = getattr(mod, name, None) if mod is not None else None
        if fn is None or not callable(fn):
            return None
        seen = self._host_view(f"{module}.{name}", name, fn)
        return _func_info(name, seen if seen is not None else fn)


__all__ = ["LiveResolver"]
