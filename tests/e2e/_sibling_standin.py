"""A stand-in for a sibling plugin that wraps ``Scheduler.schedule`` and
``update_from_output`` exactly as kvcompress does: closures over the methods it found, no
``__wrapped__``, and its own installed flag on the class (it never installs twice and has no
undo). It counts the calls that went through it."""

from __future__ import annotations

from typing import Any

FLAG = "_standin_sibling_installed"
CALLS = {"schedule": 0, "update_from_output": 0}


def install() -> None:
    """Wrap the Scheduler's two step methods (once per process, by its own flag)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    if Scheduler.__dict__.get(FLAG, False):
        return
    original_schedule = Scheduler.schedule
    original_update = Scheduler.update_from_output

    def schedule(scheduler: Any, *args: Any, **kwargs: Any) -> Any:
        CALLS["schedule"] += 1
        return original_schedule(scheduler, *args, **kwargs)

    def update_from_output(scheduler: Any, *args: Any, **kwargs: Any) -> Any:
        CALLS["update_from_output"] += 1
        return original_update(scheduler, *args, **kwargs)

    setattr(Scheduler, f"{FLAG}_originals", (original_schedule, original_update))
    Scheduler.schedule = schedule
    Scheduler.update_from_output = update_from_output
    setattr(Scheduler, FLAG, True)


def is_mine(fn: Any) -> bool:
    """True for a wrapper this stand-in installed."""
    return getattr(fn, "__module__", "") == __name__


def remove() -> None:
    """Put back what it wrapped (tests only; the plugin it stands in for has no undo)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from vllm_hust_vspec.host.patching import settle_retired

    originals = Scheduler.__dict__.get(f"{FLAG}_originals")
    if originals is None:
        return
    Scheduler.schedule, Scheduler.update_from_output = originals
    delattr(Scheduler, f"{FLAG}_originals")
    delattr(Scheduler, FLAG)
    settle_retired()
