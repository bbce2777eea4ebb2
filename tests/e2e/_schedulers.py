"""Scheduler subclasses for tests/e2e/test_engine_scheduler_subclass.py, importable by
``scheduler_cls`` (tests/e2e is on sys.path): the ways a host's own scheduler can replace
``Scheduler.schedule`` (vllm-ascend ships several)."""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

from vllm_hust_vspec.host.patching import original_of


class CopiedScheduler(Scheduler):
    """Re-implements ``schedule`` (here: the unpatched base body), as a copied-and-edited
    scheduler does: it never calls the (wrapped) base method."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        return original_of(Scheduler, "schedule")(self, *args, **kwargs)


class ExtendingScheduler(Scheduler):
    """Overrides ``schedule`` and calls the base one (the hook must still run once)."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        return super().schedule(*args, **kwargs)


class NoLookupScheduler(Scheduler):
    """Schedules without asking ``dynamic_sd_lookup`` (a scheduler older than vLLM's
    dynamic speculation): adaptive gamma cannot apply."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        lookup, self.dynamic_sd_lookup = self.dynamic_sd_lookup, None
        try:
            return original_of(Scheduler, "schedule")(self, *args, **kwargs)
        finally:
            self.dynamic_sd_lookup = lookup
