"""Diagnostics traces on upstream vLLM (worker process): draft log, drafter I/O, target hidden
states and the target's argmax tokens (the input of ``vllm-hust-vspec-active-vocab``).

Formats and bounds are in docs/diagnostics.md. Where the data is visible in vLLM 0.32:

* the drafter's inputs and outputs: ``propose`` of ``EagleProposer`` (EAGLE, EAGLE-3, MTP) and
  ``DraftModelProposer`` (separate draft model), called by the runner with keyword arguments.
  The wrapper is set on those two classes and reaches the base class's ``propose`` through
  ``super()`` at call time, so the draft-side patches of ``host.drafting`` (on the base
  class) still run inside it whatever the install order;
* the tokens the target produced: ``GPUModelRunner._bookkeeping_sync`` returns them per
  request (synchronous scheduling only; under async scheduling they stay on the device);
* shutdown: ``Worker.shutdown`` calls ``GPUModelRunner.shutdown``; ``atexit`` is the fallback.

The patches are installed only when a diagnostics option is set when :func:`install_diagnostics`
runs, so a host that lacks one of these attributes fails closed only for users who asked for a
trace. Each runner with a trace on gets a :class:`RunnerDiagnostics`; the step only reads
tensors (``tolist`` / a CPU copy, which syncs a device: diagnostics only), encodes, and hands
the bytes to one writer thread, never waiting for it (a full queue drops and counts).
"""

from __future__ import annotations

import atexit
import logging
import os
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host.abi.capabilities import MODEL_RUNNER
from vllm_hust_vspec.host.background import Background, close_at_exit
from vllm_hust_vspec.host.diagnostic_options import ARGMAX_OPTION, DRAFT_OPTIONS, requested
from vllm_hust_vspec.host.jsonl import encode_lines
from vllm_hust_vspec.host.patching import Patcher, resolve

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.diagnostics")

ATTR = "_vspec_diagnostics"
PROPOSERS = (
    ("vllm.v1.spec_decode.eagle", "EagleProposer"),
    ("vllm.v1.spec_decode.draft_model", "DraftModelProposer"),
)
ARGMAX_FORMAT = "vspec_target_argmax"
DRAFT_IO_FORMAT = "vspec_draft_io"
FORMAT_VERSION = 1
MIB = 1 << 20


class DiagnosticsError(RuntimeError):
    """A diagnostics option cannot be honoured on this host, method or drafter."""


@dataclass(frozen=True)
class Limits:
    """The bounds of every trace (documented in docs/diagnostics.md)."""

    log_first: int = 16  # draft log: every one of the first N draft steps ...
    log_every: int = 64  # ... then every Mth
    log_requests: int = 8  # requests listed per logged step
    io_steps: int = 10_000  # draft I/O JSONL: records per run
    io_bytes: int = 256 * MIB
    hidden_steps: int = 256  # hidden-state files per run
    hidden_bytes: int = 1024 * MIB  # tensor bytes over all files of a run
    argmax_steps: int = 10_000_000
    argmax_bytes: int = 1024 * MIB
    argmax_batch: int = 16  # argmax lines per hand-over to the writer
    queue_items: int = 1024  # hand-overs waiting for the writer thread


LIMITS = Limits()


def should_log(step: int, limits: Limits = LIMITS) -> bool:
    """Whether the draft log shows this draft step (0-based count of ``propose`` calls)."""
    return step < limits.log_first or (step - limits.log_first) % limits.log_every == 0


class Budget:
    """Counts the steps and bytes one trace has written; refuses past its bound (once logged)."""

    def __init__(self, option: str, max_steps: int, max_bytes: int) -> None:
        self.option = option
        self.max_steps = max_steps
        self.max_bytes = max_bytes
        self.steps = 0
        self.bytes = 0
        self.truncated = False

    def admit(self, nbytes: int) -> bool:
        """Reserve one step of ``nbytes``; False (and truncated) once a bound would be passed."""
        if self.truncated:
            return False
        if self.steps + 1 > self.max_steps or self.bytes + nbytes > self.max_bytes:
            self.truncated = True
            logger.warning(
                "vSpec diagnostics: %s reached its bound (%d steps, %d bytes; limits %d steps, "
                "%d bytes); later steps are not written", self.option, self.steps, self.bytes,
                self.max_steps, self.max_bytes,
            )
            return False
        self.steps += 1
        self.bytes += nbytes
        return True

    def summary(self) -> dict[str, Any]:
        """What the trace's closing line reports."""
        return {"steps": self.steps, "bytes": self.bytes, "truncated": self.truncated}


class Writer(Background):
    """The runner's file jobs, run in order on one background thread; :meth:`submit` never
    blocks (a full queue drops and counts). A failed job is logged and counted."""

    def __init__(self, capacity: int = LIMITS.queue_items) -> None:
        self.failed = 0
        super().__init__("vspec-diagnostics", self._run_jobs, capacity)

    def _run_jobs(self, jobs: list[Callable[[], object]]) -> None:
        for job in jobs:
            try:
                job()
            except Exception:  # noqa: BLE001 - a failed write must not kill the thread
                self.failed += 1
                logger.exception("vSpec diagnostics: a trace write failed")

    def close(self, timeout: float = 30.0) -> bool:
        """Run what is queued, then stop the thread (bounded wait). Idempotent."""
        if not super().close(timeout):
            logger.warning("vSpec diagnostics: writer stuck; closing without draining")
            return False
        return True


def _line(record: dict[str, Any]) -> bytes:
    return encode_lines((record,))


class JsonlTrace:
    """An append-only JSON Lines file: a header line now, bounded records, a closing line.

    Each hand-over is one ``write`` on an unbuffered ``O_APPEND`` file, so lines from
    several processes appending to one path never split each other."""

    def __init__(
        self, path: Path, option: str, header: dict[str, Any], budget: Budget, writer: Writer,
        batch: int = 1,
    ) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("ab", buffering=0)
            self._file.write(_line(header))
        except OSError as exc:
            raise DiagnosticsError(
                f"vSpec: {option}: cannot write '{path}': {exc}; give a writable path or unset "
                f"the option"
            ) from exc
        self.path = path
        self.budget = budget
        self._writer = writer
        self._batch = max(1, batch)
        self._pending: list[bytes] = []

    def append(self, record: dict[str, Any]) -> bool:
        """Encode and buffer one step record; False when the bound stops it."""
        data = _line(record)
        if not self.budget.admit(len(data)):
            return False
        self._pending.append(data)
        if len(self._pending) >= self._batch:
            self.push()
        return True

    def push(self) -> None:
        """Hand the buffered lines to the writer thread."""
        data, self._pending = b"".join(self._pending), []
        if data:
            self._writer.submit(lambda: self._file.write(data))

    def close(self, end: dict[str, Any]) -> None:
        """Queue the buffered lines and the closing line, then the file's close."""
        data = b"".join(self._pending) + _line(end)
        self._pending = []
        self._writer.submit(lambda: self._file.write(data), wait=10.0)
        self._writer.submit(self._file.close, wait=10.0)


class HiddenTrace:
    """One ``torch.save`` file per step (written as ``.tmp`` and renamed: never half a file)."""

    def __init__(self, folder: Path, run: str, budget: Budget, writer: Writer) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DiagnosticsError(
                f"vSpec: eagle_target_hidden_trace_dir: cannot create '{folder}': {exc}"
            ) from exc
        self.folder = folder
        self.run = run
        self.budget = budget
        self._writer = writer

    def save(self, step: int, payload: dict[str, Any]) -> bool:
        """Copy the tensors off the step's buffers now; write them on the writer thread."""
        import torch

        hidden = payload["hidden_states"]
        if not isinstance(hidden, torch.Tensor):
            return False
        if not self.budget.admit(int(hidden.numel()) * int(hidden.element_size())):
            return False
        # the runner reuses these buffers next step, so the copy is taken now
        payload = {
            k: v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v
            for k, v in payload.items()
        }
        path = self.folder / f"hidden-{self.run}-{step:07d}.pt"

        def write() -> None:
            tmp = path.with_suffix(".pt.tmp")
            torch.save(payload, tmp)
            os.replace(tmp, path)

        return self._writer.submit(write)


def _tolist(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


def _tp_rank() -> int:
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        return int(get_tensor_model_parallel_rank())
    except Exception:  # noqa: BLE001 - no distributed state (tests, single process)
        return 0


class RunnerDiagnostics:
    """The traces of one model runner (built at its construction, before model load)."""

    def __init__(
        self, options: dict[str, Any], runner: Any, limits: Limits = LIMITS,
        method: str | None = None,
    ) -> None:
        self.limits = limits
        self.run = uuid.uuid4().hex[:12]
        self.step = 0  # completed sample steps (bookkeeping calls) of this runner
        self.draft_steps = 0  # propose calls
        self._runner = weakref.ref(runner) if runner is not None else (lambda: None)
        self._closed = False
        self.writer = Writer(limits.queue_items)
        header = {"version": FORMAT_VERSION, "run": self.run, "pid": os.getpid(),
                  "started": round(time.time(), 3), "method": method}
        self.log_drafts = bool(options.get("eagle_draft_trace"))
        self.io: JsonlTrace | None = None
        self.hidden: HiddenTrace | None = None
        self.argmax: JsonlTrace | None = None
        try:
            if options.get("eagle_draft_io_trace_dir"):
                folder = Path(options["eagle_draft_io_trace_dir"])
                self.io = JsonlTrace(
                    folder / f"draft_io-{self.run}.jsonl", "eagle_draft_io_trace_dir",
                    {"trace": DRAFT_IO_FORMAT, **header},
                    Budget("eagle_draft_io_trace_dir", limits.io_steps, limits.io_bytes),
                    self.writer,
                )
            if options.get("eagle_target_hidden_trace_dir"):
                self.hidden = HiddenTrace(
                    Path(options["eagle_target_hidden_trace_dir"]), self.run,
                    Budget("eagle_target_hidden_trace_dir", limits.hidden_steps,
                           limits.hidden_bytes),
                    self.writer,
                )
            if options.get(ARGMAX_OPTION):
                self.argmax = JsonlTrace(
                    Path(options[ARGMAX_OPTION]), ARGMAX_OPTION,
                    {"trace": ARGMAX_FORMAT, **header},
                    Budget(ARGMAX_OPTION, limits.argmax_steps, limits.argmax_bytes),
                    self.writer, batch=limits.argmax_batch,
                )
        except BaseException:
            self.writer.close()
            raise
        self._atexit = close_at_exit(self)

    @property
    def drafting(self) -> bool:
        """True when a draft-side trace is on."""
        return self.log_drafts or self.io is not None or self.hidden is not None

    def req_ids(self) -> list[str]:
        """The runner's batch order, which is the row order of the drafter's tensors."""
        runner = self._runner()
        batch = getattr(runner, "input_batch", None)
        return list(getattr(batch, "req_ids", []) or [])

    def on_propose(self, k: int, inputs: dict[str, Any], out: Any) -> None:
        """Record one ``propose`` call (its keyword inputs and the draft ids it returned)."""
        if self._closed:
            return
        n, self.draft_steps = self.draft_steps, self.draft_steps + 1
        draft = out[0] if isinstance(out, tuple) else out
        drafts = _tolist(draft)
        req_ids = self.req_ids()
        if self.log_drafts and should_log(n, self.limits):
            shown = min(len(req_ids), self.limits.log_requests)
            rows = [f"{r}={drafts[i] if i < len(drafts) else []}"
                    for i, r in enumerate(req_ids[:shown])]
            more = f" (+{len(req_ids) - shown} more)" if len(req_ids) > shown else ""
            logger.info("vSpec draft step %d (runner step %d, K=%d): %s%s", n, self.step, k,
                        " ".join(rows), more)
        if self.io is not None:
            self.io.append({
                "step": self.step, "draft_step": n, "k": int(k), "req_ids": req_ids,
                "target_token_ids": _tolist(inputs.get("target_token_ids")),
                "target_positions": _tolist(inputs.get("target_positions")),
                "next_token_ids": _tolist(inputs.get("next_token_ids")),
                "draft_token_ids": drafts,
            })
        if self.hidden is not None:
            self.hidden.save(self.step, {
                "step": self.step, "draft_step": n, "k": int(k), "req_ids": req_ids,
                "target_token_ids": inputs.get("target_token_ids"),
                "target_positions": inputs.get("target_positions"),
                "hidden_states": inputs.get("target_hidden_states"),
            })

    def on_sampled(self, req_ids: list[str], sampled: list[list[int]]) -> None:
        """Record the tokens the target produced this step, cut at each request's
        ``max_tokens`` (the scheduler drops tokens past it), then count the step."""
        step, self.step = self.step, self.step + 1
        if self.argmax is None or self._closed:
            return
        runner = self._runner()
        requests = getattr(runner, "requests", {}) or {}
        ids: list[str] = []
        tokens: list[list[int]] = []
        for rid, new in zip(req_ids, sampled, strict=False):
            if not new:
                continue
            new = list(new)
            state = requests.get(rid)
            params = getattr(state, "sampling_params", None)
            limit = getattr(params, "max_tokens", None)
            if limit is not None and state is not None:
                before = len(state.output_token_ids) - len(new)
                new = new[: max(0, int(limit) - before)]
            if new:
                ids.append(rid)
                tokens.append([int(t) for t in new])
        if ids:
            self.argmax.append({"step": step, "req_ids": ids, "token_ids": tokens})

    def close(self) -> None:
        """Write the closing lines, drain the writer and close every file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._atexit)
        for trace in (self.io, self.argmax):
            if trace is not None:
                trace.close({"end": True, **trace.budget.summary(),
                             "dropped_writes": self.writer.dropped})
        self.writer.close()
        if self.writer.dropped or self.writer.failed:
            logger.warning("vSpec diagnostics: %d writes dropped (queue full), %d failed",
                           self.writer.dropped, self.writer.failed)


def check_settings(settings: Settings, *, ascend: bool) -> dict[str, Any]:
    """The requested options, after the checks that need no runner (fail closed)."""
    options = requested(settings)
    if not options:
        return options
    if ascend:
        raise DiagnosticsError(
            f"vSpec: {', '.join(sorted(options))} are implemented on the upstream vLLM worker "
            "only, not on vLLM-Ascend's; unset them"
        )
    draft_side = sorted(n for n in options if n in DRAFT_OPTIONS)
    if draft_side and settings.method == "ngram":
        raise DiagnosticsError(
            f"vSpec: {', '.join(draft_side)} trace a model-based drafter (draft, eagle, eagle3, "
            "mtp); method 'ngram' has none; unset them"
        )
    return options


def check_runner(options: dict[str, Any], runner: Any, traced: tuple[type, ...]) -> None:
    """Runner-level checks, at its construction (before any weights load)."""
    draft_side = sorted(n for n in options if n in DRAFT_OPTIONS)
    drafter = getattr(runner, "drafter", None)
    if draft_side:
        cls = type(drafter)
        if drafter is None or not isinstance(drafter, traced) or not getattr(
            getattr(cls, "propose", None), "__vspec_diagnostics__", False
        ):
            raise DiagnosticsError(
                f"vSpec: {', '.join(draft_side)} need a draft model or EAGLE drafter whose "
                f"propose vSpec traces; this runner's drafter is {cls.__name__}; unset them"
            )
    if ARGMAX_OPTION in options and getattr(runner, "use_async_scheduling", False):
        raise DiagnosticsError(
            f"vSpec: {ARGMAX_OPTION} needs synchronous scheduling (under async scheduling the "
            "sampled tokens stay on the device); pass --no-async-scheduling or unset it"
        )


def _make_init_wrapper(
    get_settings: Callable[[], Settings], traced: tuple[type, ...],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            orig(self, *args, **kwargs)
            options = requested(get_settings())
            if not options or _tp_rank() != 0:  # ranks > 0 would write the same data again
                return
            check_runner(options, self, traced)
            spec = getattr(self, "speculative_config", None)
            diag = RunnerDiagnostics(options, self, method=getattr(spec, "method", None))
            setattr(self, ATTR, diag)
            if diag.drafting:
                setattr(self.drafter, ATTR, diag)
            logger.info("vSpec diagnostics on (%s); they sync and write to disk every step: "
                        "not for throughput measurements", ", ".join(sorted(options)))

        return __init__

    return make


def _make_bookkeeping_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def _bookkeeping_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        diag = getattr(self, ATTR, None)
        if diag is not None:
            # (nans, nans_device, logprobs, valid_sampled_token_ids, prompt_logprobs,
            #  req_ids, req_id_to_index, invalid_req_indices)
            diag.on_sampled(out[5], out[3])
        return out

    return _bookkeeping_sync


def _make_shutdown_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def shutdown(self: Any, *args: Any, **kwargs: Any) -> Any:
        diag = getattr(self, ATTR, None)
        if diag is not None:
            diag.close()  # first: the runner's own teardown may fail or be cut short
        return orig(self, *args, **kwargs)

    return shutdown


def _make_propose_wrapper(owner: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(_orig: Callable[..., Any]) -> Callable[..., Any]:
        def propose(self: Any, num_speculative_tokens: int, *args: Any, **kwargs: Any) -> Any:
            # super() at call time: the base class's propose as patched now (host.drafting)
            base: Any = super(owner, self)
            out = base.propose(num_speculative_tokens, *args, **kwargs)
            diag = getattr(self, ATTR, None)
            if diag is not None:
                diag.on_propose(int(num_speculative_tokens), kwargs, out)
            return out

        propose.__vspec_diagnostics__ = True  # type: ignore[attr-defined]
        return propose

    return make


def install_diagnostics(patcher: Patcher, get_settings: Callable[[], Settings]) -> bool:
    """Patch the runner (and the model-based proposers) for the diagnostics options set now;
    returns whether anything was patched. Fails closed (:class:`DiagnosticsError`, naming the
    option) where a requested trace cannot run."""
    from vllm_hust_vspec.host.abi.host_facts import is_ascend_platform

    options = check_settings(get_settings(), ascend=is_ascend_platform())
    if not options:
        return False
    runner = resolve(*MODEL_RUNNER)
    traced: list[type] = []
    if any(n in DRAFT_OPTIONS for n in options):
        for module, name in PROPOSERS:
            cls = resolve(module, name)
            if "propose" in vars(cls):  # super() would skip the class's own propose
                raise DiagnosticsError(
                    f"vSpec: {name} defines its own propose on this host; the draft traces "
                    f"({', '.join(n for n in options if n in DRAFT_OPTIONS)}) do not support it"
                )
            if any(issubclass(cls, t) for t in traced):  # already traced through its base
                continue
            patcher.wrap(cls, "propose", _make_propose_wrapper(cls))
            traced.append(cls)
    patcher.wrap(runner, "__init__", _make_init_wrapper(get_settings, tuple(traced)))
    patcher.wrap(runner, "_bookkeeping_sync", _make_bookkeeping_wrapper)
    patcher.wrap(runner, "shutdown", _make_shutdown_wrapper)
    logger.info("vSpec: diagnostics patches installed (%s)", ", ".join(sorted(options)))
    return True


__all__ = [
    "ARGMAX_FORMAT",
    "ATTR",
    "DRAFT_IO_FORMAT",
    "LIMITS",
    "Budget",
    "DiagnosticsError",
    "HiddenTrace",
    "JsonlTrace",
    "Limits",
    "RunnerDiagnostics",
    "Writer",
    "check_runner",
    "check_settings",
    "install_diagnostics",
    "requested",
    "should_log",
]
