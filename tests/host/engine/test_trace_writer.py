"""TraceWriter: buffered hand-over to a writer thread, nothing lost on close, bounded."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from vllm_hust_vspec.host.engine.trace import TraceWriter


def _lines(path: Path) -> list[dict[str, int]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_records_are_handed_over_in_batches_and_all_written_on_close(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, batch=4)
    for i in range(6):
        assert writer.write({"step": i})
    writer.flush()
    # flush pushes the partial batch too: a reader after an idle engine sees every record
    assert [r["step"] for r in _lines(path)] == list(range(6))
    for i in range(6, 9):
        writer.write({"step": i})
    writer.close()
    assert [r["step"] for r in _lines(path)] == list(range(9))
    assert writer.written == 9 and writer.dropped == 0
    assert not writer.write({"step": 9})  # closed: refused, nothing written
    writer.close()  # idempotent


def test_a_full_queue_drops_whole_batches_and_counts_them(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path / "t.jsonl", capacity=2, batch=2)  # queue: one batch
    entered, release = threading.Event(), threading.Event()
    real_write = writer._write_lines

    def slow_write(batch: list[dict[str, int]]) -> None:
        entered.set()
        release.wait(5)
        real_write(batch)

    writer._write_lines = slow_write  # type: ignore[method-assign]
    writer.write({"step": 0})
    writer.write({"step": 1})  # batch 1 handed over; the writer takes it and stalls
    assert entered.wait(5)
    for i in range(2, 6):  # batch 2 fills the queue, batch 3 finds it full
        assert writer.write({"step": i})
    assert writer.dropped == 2
    release.set()
    writer.close()
    assert [r["step"] for r in _lines(tmp_path / "t.jsonl")] == [0, 1, 2, 3]
    assert writer.written == 4


def test_each_run_opens_with_its_header_on_a_fresh_line(tmp_path: Path) -> None:
    from vllm_hust_vspec.host.engine.trace import run_header
    from vllm_hust_vspec.sim.replay import read_trace_runs

    path = tmp_path / "t.jsonl"
    step = {"t": 1.0, "batch": 2, "gamma": 1, "drafted": 2, "accepted": 1,
            "interval_s": 0.01, "reward": 300.0}
    first = TraceWriter(path, header=run_header("aaaa"))
    for i in range(1, 4):
        first.write({**step, "step": i})
    first.close()
    with path.open("a") as fh:  # a crash mid-write
        fh.write('{"t": 2.0, "step": 4, "bat')
    second = TraceWriter(path, header=run_header("bbbb"))
    second.write({**step, "step": 1})
    second.close()
    warnings: list[str] = []
    runs = read_trace_runs(path, warn=warnings.append)
    assert [r.settings for r in runs] == ["aaaa", "bbbb"]
    assert [len(r.records) for r in runs] == [3, 1]
    assert len(warnings) == 1 and ":5:" in warnings[0]


def test_the_header_names_the_engine_facts_a_recalibration_reads() -> None:
    from types import SimpleNamespace

    from vllm_hust_vspec.host.engine.trace import host_facts

    def scheduler(mode: str) -> SimpleNamespace:
        config = SimpleNamespace(
            compilation_config=SimpleNamespace(cudagraph_mode=SimpleNamespace(name=mode),
                                               cudagraph_capture_sizes=[16, 8, 8, 1]),
            scheduler_config=SimpleNamespace(max_num_seqs=128, max_num_batched_tokens=33280))
        return SimpleNamespace(vllm_config=config)

    facts = host_facts(scheduler("FULL"), 4, 8)
    assert facts == {"max_gamma": 4, "refill": 8, "max_num_seqs": 128,
                     "max_num_batched_tokens": 33280, "graph_mode": "FULL",
                     "capture_sizes": [1, 8, 16]}
    # without graphs nothing is padded: no capture sizes
    assert host_facts(scheduler("NONE"), 4, 8)["capture_sizes"] == []


def test_record_objects_are_encoded_by_the_writer_thread_as_their_json(tmp_path: Path) -> None:
    from vllm_hust_vspec.adaptive.trace_record import TraceRecord

    record = TraceRecord(t=1.5, batch=2, gamma=1, drafted=2, accepted=1, interval_s=0.002,
                         reward=1500.0, step=7, lengths=(1, 1))
    writer = TraceWriter(tmp_path / "t.jsonl")
    writer.write(record)
    writer.write({"step": 8})
    writer.close()
    assert _lines(tmp_path / "t.jsonl") == [record.to_json(), {"step": 8}]
    assert writer.written == 2


def test_an_unencodable_batch_is_dropped_counted_and_the_writer_goes_on(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path / "t.jsonl", batch=1)
    writer.write({"bad": object()})
    writer.flush()
    writer.write({"step": 1})
    writer.close()
    assert _lines(tmp_path / "t.jsonl") == [{"step": 1}]
    assert writer.dropped == 1 and writer.written == 1
