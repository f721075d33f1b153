"""Segment rolling and retention (size and time), checked against the files
on disk and against what clients can read."""

from __future__ import annotations

import math
import time

from confluent_kafka import Consumer, Producer

from oxbow_harness import (
    DeliveryLog,
    base_offset_of,
    consume_all,
    consumer_config,
    create_topic,
    flush_all,
    produce_one,
    read_batches,
    read_one,
    segment_files,
    wait_until,
    watermarks,
)

SEGMENT_BYTES = 16384
RETENTION_BYTES = 50000
CHECK_INTERVAL = {"log.retention.check.interval.ms": "500"}


def key_of(i: int) -> bytes:
    return b"k-%d" % i


def value_of(i: int) -> bytes:
    return (b"%08d" % i) * 25  # 200 bytes


def produce_n(broker, topic: str, start: int, count: int) -> None:
    # Small batches so that many fit in a 16 KiB segment.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 4000, "compression.type": "none"})
    dr = DeliveryLog(lambda m: int(m.key()[2:]))
    for i in range(start, start + count):
        produce_one(producer, topic=topic, partition=0, key=key_of(i), value=value_of(i), on_delivery=dr)
        if i % 500 == 0:
            producer.poll(0)
    flush_all(producer)
    assert not dr.failed, list(dr.failed.items())[:3]
    assert dr.ok == {i: (0, i) for i in range(start, start + count)}


def log_bytes(pdir) -> int:
    return sum(p.stat().st_size for p in segment_files(pdir))


def assert_readable_from(broker, topic: str, low: int, high: int) -> None:
    recs = consume_all(broker, topic, [0])[0]
    assert recs, f"nothing to read although watermarks are ({low}, {high})"
    assert recs[0].offset == low, f"consuming from the beginning starts at {recs[0].offset}, low watermark {low}"
    assert [r.offset for r in recs] == list(range(low, high))
    for r in recs:
        assert (r.key, r.value) == (key_of(r.offset), value_of(r.offset)), f"record at {r.offset}"


def test_size_retention_deletes_oldest_segments(broker_factory):
    broker = broker_factory(CHECK_INTERVAL)
    topic = "ret-bytes"
    create_topic(broker, topic, 1, config={"segment.bytes": str(SEGMENT_BYTES),
                                           "retention.bytes": str(RETENTION_BYTES)})
    n = 2200  # ~520 KB on disk
    produce_n(broker, topic, 0, n)
    pdir = broker.partition_dir(topic, 0)
    active_after_produce = segment_files(pdir)[-1]
    min_segments_ever = math.ceil(n * 200 / SEGMENT_BYTES)  # values alone: a lower bound on segments written

    state = {}

    def retained() -> bool:
        low, high = watermarks(broker, topic, 0)
        files = segment_files(pdir)
        state.update(low=low, high=high, files=[f.name for f in files], size=log_bytes(pdir))
        return low > 0 and len(files) < min_segments_ever and state["size"] <= RETENTION_BYTES + SEGMENT_BYTES

    wait_until(retained, 30, f"size retention to apply (state {state})", interval=0.25)
    time.sleep(1.5)  # a few more retention passes: they must not delete anything else
    low, high = watermarks(broker, topic, 0)
    files = segment_files(pdir)
    print(f"after retention: watermarks=({low}, {high}), segments={[f.name for f in files]}, bytes={log_bytes(pdir)}")

    assert high == n, f"high watermark {high}, produced {n}: retention must not touch the tail"
    assert low == base_offset_of(files[0]), \
        f"log start offset {low} != base offset of oldest remaining segment {files[0].name}"
    assert active_after_produce.exists(), f"active segment {active_after_produce.name} was deleted"
    assert log_bytes(pdir) >= RETENTION_BYTES, \
        f"retention deleted below retention.bytes: {log_bytes(pdir)} < {RETENTION_BYTES} bytes left"
    assert log_bytes(pdir) <= RETENTION_BYTES + SEGMENT_BYTES
    assert_readable_from(broker, topic, low, high)

    consumer = Consumer(consumer_config(broker))
    try:
        assert read_one(consumer, topic, 0, low).offset() == low
    finally:
        consumer.close()


def test_time_retention_deletes_rolled_segments(broker_factory):
    broker = broker_factory(CHECK_INTERVAL)
    topic = "ret-time"
    create_topic(broker, topic, 1, config={"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "1000"})
    n = 450  # ~100 KB: several rolled segments
    produce_n(broker, topic, 0, n)
    pdir = broker.partition_dir(topic, 0)
    active_base = base_offset_of(segment_files(pdir)[-1])
    assert active_base > 0, "test needs at least one rolled segment"

    state = {}

    def expired() -> bool:
        low, high = watermarks(broker, topic, 0)
        files = segment_files(pdir)
        state.update(low=low, high=high, files=[f.name for f in files])
        return low >= active_base and all(base_offset_of(f) >= active_base for f in files)

    wait_until(expired, 30, f"segments before offset {active_base} to expire (state {state})", interval=0.25)
    low, high = watermarks(broker, topic, 0)
    files = segment_files(pdir)
    print(f"after time retention: watermarks=({low}, {high}), segments={[f.name for f in files]}")
    assert high == n, f"high watermark {high}, produced {n}"
    assert files, "no segment left at all (a partition always has an active segment)"
    assert low == base_offset_of(files[0]), f"log start offset {low} != oldest segment {files[0].name}"
    if low < high:
        assert_readable_from(broker, topic, low, high)

    # The partition keeps working: new records land at the old high watermark.
    produce_n(broker, topic, n, 5)
    assert watermarks(broker, topic, 0)[1] == n + 5


def test_segments_roll_at_segment_bytes(broker_factory):
    broker = broker_factory()
    topic = "roll"
    create_topic(broker, topic, 1, config={"segment.bytes": str(SEGMENT_BYTES)})
    pdir = broker.partition_dir(topic, 0)

    produce_n(broker, topic, 0, 450)
    count1 = len(segment_files(pdir))
    produce_n(broker, topic, 450, 450)
    files = segment_files(pdir)
    assert len(files) > count1 >= 2, f"segment count {count1} -> {len(files)}"
    total = log_bytes(pdir)
    assert len(files) >= math.ceil(total / SEGMENT_BYTES), f"{len(files)} segments hold {total} bytes"

    expected_next = 0
    for k, f in enumerate(files):
        base = base_offset_of(f)
        assert f.with_suffix(".index").exists() and f.with_suffix(".timeindex").exists(), \
            f"{f.name} lacks its .index/.timeindex"
        batches, tail = read_batches(f)
        assert tail == 0 and batches, f"{f.name}: not a clean sequence of record batches"
        assert batches[0].base_offset == base == expected_next, \
            f"{f.name}: first batch at offset {batches[0].base_offset}, expected {expected_next}"
        expected_next = batches[-1].last_offset + 1
        size = f.stat().st_size
        assert size <= SEGMENT_BYTES, f"{f.name} is {size} bytes > segment.bytes"
        if k + 1 < len(files):
            next_first, _ = read_batches(files[k + 1])
            # Kafka rolls only when the next batch would not fit.
            assert size + next_first[0].size > SEGMENT_BYTES, \
                f"{f.name} rolled early: {size} bytes + next batch {next_first[0].size} <= {SEGMENT_BYTES}"
    assert expected_next == 900

    consumer = Consumer(consumer_config(broker))
    try:
        for f in files:
            base = base_offset_of(f)
            msg = read_one(consumer, topic, 0, base)
            assert (msg.offset(), msg.key()) == (base, key_of(base)), f"reading at {f.name}"
    finally:
        consumer.close()
    assert watermarks(broker, topic, 0) == (0, 900)
