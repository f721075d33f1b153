"""Damaged segments on restart: torn tail, garbage tail, corrupt offset index.

Layout under test: <log.dirs>/<topic>-<partition>/<20-digit base offset>.log
(+ .index, .timeindex) and a clean-shutdown marker `.oxbow_cleanshutdown`.
The damage is done while the broker is down; the marker is removed so the
broker must treat the restart as unclean. What the broker serves afterwards is
compared with what the test computes independently from the segment bytes.
"""

from __future__ import annotations

import random
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from oxbow_harness import (
    CLEAN_SHUTDOWN_MARKER,
    REFERENCE_KAFKA,
    DeliveryLog,
    consume_all,
    consumer_config,
    create_topic,
    find_files_named,
    flush_all,
    produce_one,
    read_batches,
    read_one,
    segment_files,
    base_offset_of,
    watermarks,
)

TOPIC = "rec-topic"
SEGMENT_BYTES = 20000
BATCHES = 40
PER_BATCH = 25
N = BATCHES * PER_BATCH
TRUNCATE_BYTES = 37


def key_of(i: int) -> bytes:
    return b"rk-%d" % i


def value_of(i: int) -> bytes:
    return (b"rv-%d-" % i) + bytes((i * 13 + j) % 251 for j in range(60 + (i * 17) % 120))


def produce_known(broker, base_ts: int, start: int, count: int, per_batch: int) -> DeliveryLog:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "linger.ms": 1000, "compression.type": "none"})
    dr = DeliveryLog(lambda m: int(m.key()[3:]))
    for i in range(start, start + count):
        produce_one(producer, topic=TOPIC, partition=0, key=key_of(i), value=value_of(i),
                    timestamp=base_ts + i, on_delivery=dr)
        if (i - start + 1) % per_batch == 0:
            flush_all(producer)  # one batch per flush
    flush_all(producer)
    assert not dr.failed, list(dr.failed.items())[:3]
    assert dr.ok == {i: (0, i) for i in range(start, start + count)}
    return dr


def assert_serves_exactly(broker, count: int, base_ts: int) -> None:
    assert watermarks(broker, TOPIC, 0) == (0, count)
    recs = consume_all(broker, TOPIC, [0])[0]
    got = [(r.offset, r.key, r.value, r.timestamp) for r in recs]
    want = [(i, key_of(i), value_of(i), base_ts + i) for i in range(count)]
    if got != want:
        first_bad = next((k for k, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
        pytest.fail(f"served {len(got)} records, expected {count}; first difference at #{first_bad}: "
                    f"got {got[first_bad][:2] if first_bad < len(got) else None}, "
                    f"want {want[first_bad][:2] if first_bad < len(want) else None}", pytrace=False)


def crafted_garbage(next_offset: int, rng: random.Random) -> bytes:
    """A plausible batch header (right offset, magic 2, sane length) with a bad
    CRC and random body: what a torn write of a new batch looks like."""
    body_len = 200
    header = struct.pack(">qiib", next_offset, body_len, 0, 2) + b"\xde\xad\xbe\xef"
    return header + rng.randbytes(12 + body_len - len(header)) + rng.randbytes(300)


@pytest.mark.parametrize("damage", ["garbage_tail", "truncated_tail", "corrupt_index", "combined"])
def test_restart_after_damage(broker_factory, damage):
    rng = random.Random(f"recovery-{damage}")
    broker = broker_factory()
    create_topic(broker, TOPIC, 1, config={"segment.bytes": str(SEGMENT_BYTES)})
    base_ts = int(time.time() * 1000) - 60_000
    produce_known(broker, base_ts, 0, N, PER_BATCH)
    broker.stop()

    pdir = broker.partition_dir(TOPIC, 0)
    logs = segment_files(pdir)
    assert len(logs) >= 4, f"expected several segments with segment.bytes={SEGMENT_BYTES}, got {[p.name for p in logs]}"
    for p in logs:
        base_offset_of(p)
    last_log = logs[-1]
    batches, tail = read_batches(last_log)
    assert tail == 0 and batches, f"{last_log.name}: not a clean sequence of v2 record batches (tail {tail})"
    assert batches[-1].last_offset == N - 1

    for marker in find_files_named(broker.data_dir, CLEAN_SHUTDOWN_MARKER):
        marker.unlink()

    expected = N
    if damage in ("truncated_tail", "combined"):
        size = last_log.stat().st_size
        with open(last_log, "r+b") as f:
            f.truncate(size - TRUNCATE_BYTES)
        # The torn batch is dropped; everything before it must survive.
        torn = next(b for b in batches if b.position + b.size > size - TRUNCATE_BYTES)
        expected = torn.base_offset
    if damage in ("garbage_tail", "combined"):
        with open(last_log, "ab") as f:
            f.write(crafted_garbage(expected, rng))
    damaged_index_segment = None
    if damage in ("corrupt_index", "combined"):
        # Non-active segment: its index is never rewritten by appends.
        candidates = [p for p in logs[:-1] if p.with_suffix(".index").exists()]
        assert candidates, f"no .index next to non-active segments in {pdir}: {sorted(x.name for x in pdir.iterdir())}"
        seg = max(candidates, key=lambda p: p.with_suffix(".index").stat().st_size)
        idx = seg.with_suffix(".index")
        size = idx.stat().st_size
        with open(idx, "r+b") as f:
            if size >= 16:
                f.seek(size // 2 - 8)
                f.write(rng.randbytes(16))
            else:
                f.write(rng.randbytes(16))
        damaged_index_segment = seg
    print(f"damage={damage}: segments={[p.name for p in logs]} expected records after recovery={expected}")

    broker.start()
    assert_serves_exactly(broker, expected, base_ts)

    # Random access through the (possibly damaged) index of a non-active segment.
    seg = damaged_index_segment or logs[len(logs) // 2]
    seg_batches, _ = read_batches(seg)
    lo, hi = seg_batches[0].base_offset, seg_batches[-1].last_offset
    probes = sorted({lo, hi, (lo + hi) // 2, *range(lo, hi + 1, 7)})
    consumer = Consumer(consumer_config(broker))
    try:
        for off in probes:
            msg = read_one(consumer, TOPIC, 0, off)
            assert (msg.offset(), msg.key(), msg.value()) == (off, key_of(off), value_of(off)), \
                f"read at offset {off} (segment {seg.name}) returned offset {msg.offset()}"
        try:
            got = consumer.offsets_for_times([TopicPartition(TOPIC, 0, base_ts + (lo + hi) // 2)], timeout=10)
        except KafkaException as e:
            pytest.fail(f"ListOffsets by timestamp into {seg.name} (index damaged: "
                        f"{damaged_index_segment is not None}) failed: {e}", pytrace=False)
        assert got[0].offset == (lo + hi) // 2, f"offsets_for_times in {seg.name}: {got[0].offset}"
    finally:
        consumer.close()

    # New writes continue right after the last intact record.
    produce_known(broker, base_ts, expected, 10, 10)
    assert_serves_exactly(broker, expected + 10, base_ts)

    # And the recovered state survives a clean restart.
    broker.restart()
    assert_serves_exactly(broker, expected + 10, base_ts)


def test_clean_shutdown_writes_marker_and_keeps_data(broker_factory):
    broker = broker_factory()
    create_topic(broker, TOPIC, 1, config={"segment.bytes": str(SEGMENT_BYTES)})
    base_ts = int(time.time() * 1000) - 60_000
    produce_known(broker, base_ts, 0, 200, 50)
    rc = broker.stop()
    # Kafka's JVM exits 143 (128 + SIGTERM) after a graceful shutdown; Oxbow exits 0.
    assert rc in ((0, 143) if REFERENCE_KAFKA else (0,)), \
        f"broker exited with status {rc} on SIGTERM (graceful shutdown should exit 0)"
    markers = find_files_named(broker.data_dir, CLEAN_SHUTDOWN_MARKER)
    assert markers, f"no {CLEAN_SHUTDOWN_MARKER} under {broker.data_dir} after SIGTERM"
    broker.start()
    assert_serves_exactly(broker, 200, base_ts)


def test_a_fresh_single_node_start_logs_no_error(broker):
    """A new user's first screen holds no false error: a fresh single node becomes its own active
    controller and serves without an ERROR line (it once logged "no controller known" first)."""
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce("fresh-start", value=b"x")
    assert p.flush(30) == 0
    errors = [line for line in broker.log_path.read_text(errors="replace").splitlines() if " ERROR " in line]
    assert not errors, errors
