"""Log compaction through librdkafka: a compacted topic with updates and tombstones ends with
exactly the latest value of every key, and every read of the whole partition, before, during
and after cleaning, sees the same latest state with offsets only going up.

Against Apache Kafka (the reference runner) only the tombstone rule differs: Kafka keeps a
tombstone for delete.retention.ms after the first cleaning that sees it; Oxbow drops tombstones
older than delete.retention.ms by their timestamp.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from oxbow_harness import create_topic, wait_until

TOPIC = "compacted"
KEYS = 50
ROUNDS = 20


def read_partition(broker) -> list[tuple[int, str, str | None]]:
    """Every record of partition 0 from the start to the end: (offset, key, value)."""
    c = Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": "compaction-reader",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 50,
    })
    c.assign([TopicPartition(TOPIC, 0, 0)])
    out = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(m.error())
            out.append((m.offset(), m.key().decode(), None if m.value() is None else m.value().decode()))
    finally:
        c.close()
    raise AssertionError("no EOF within 60 s")


def latest(records) -> dict[str, str]:
    """Key -> latest value, deleted keys (tombstones) left out."""
    state: dict[str, str | None] = {}
    for _, k, v in records:
        state[k] = v
    return {k: v for k, v in state.items() if v is not None}


def test_compaction_keeps_latest_values_and_reads_stay_consistent(broker_factory):
    broker = broker_factory({
        "log.cleaner.backoff.ms": "3000",
        "log.retention.check.interval.ms": "300",
    })
    create_topic(broker, TOPIC, 1, config={
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "segment.ms": "1000",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "60000",
    })
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    now_ms = int(time.time() * 1000)
    for r in range(ROUNDS):
        for k in range(KEYS):
            p.produce(TOPIC, key=f"k{k}", value=f"r{r}-k{k}", partition=0)
        p.flush(10)
    # Old tombstones (past delete.retention.ms) delete keys 0..9 outright; a recent one for k10
    # stays in the log as a tombstone.
    for k in range(10):
        p.produce(TOPIC, key=f"k{k}", value=None, partition=0, timestamp=now_ms - 600_000)
    p.produce(TOPIC, key="k10", value=None, partition=0)
    assert p.flush(10) == 0
    # A record without a key is refused by a compacted topic (INVALID_RECORD).
    errors = []
    p.produce(TOPIC, value=b"no key", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors

    # Kafka rolls a segment only when a record arrives after segment.ms: one more record, later,
    # so that the tombstones are in a sealed (cleanable) segment on both brokers.
    time.sleep(1.5)
    p.produce(TOPIC, key="zz", value="roll", partition=0)
    assert p.flush(10) == 0
    want = {f"k{k}": f"r{ROUNDS - 1}-k{k}" for k in range(11, KEYS)} | {"zz": "roll"}
    before = read_partition(broker)
    assert len(before) >= len(want)
    assert latest(before) == want

    # Readers run while the cleaner works; each full read must show the same latest state.
    passes: list[int] = []
    failures: list[str] = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            recs = read_partition(broker)
            offsets = [o for o, _, _ in recs]
            if offsets != sorted(set(offsets)):
                failures.append(f"offsets not increasing: {offsets[:20]}...")
            if latest(recs) != want:
                failures.append(f"a read during cleaning saw another state: {latest(recs)}")
            passes.append(len(recs))

    t = threading.Thread(target=reader)
    t.start()
    try:
        # Compacted: every live key exactly once.
        wait_until(lambda: len([1 for _, _, v in read_partition(broker) if v is not None]) == len(want), 90,
                   "the log compacted to one record per key")
    finally:
        stop.set()
        t.join(120)
    assert not failures, failures[:3]
    after = read_partition(broker)
    assert latest(after) == want
    tombstones = [k for _, k, v in after if v is None]
    # Both keep a tombstone past the first cleaning that sees it (Kafka: for delete.retention.ms,
    # a delete horizon written into the batch; Oxbow: until a later pass, once older than
    # delete.retention.ms), so a reader part-way through the log meets every delete.
    assert set(tombstones) <= {f"k{k}" for k in range(11)} and "k10" in tombstones, tombstones
    assert sorted(k for _, k, v in after if v is not None) == sorted(want)
    # Offsets are the original ones: the last record is still at the log end.
    assert after[-1][0] == ROUNDS * KEYS + 11
    print(f"reads during cleaning: {len(passes)} full passes, sizes {sorted(set(passes))[:5]}...")

    # Compaction survives a restart (clean) and a SIGKILL.
    broker.restart()
    assert read_partition(broker) == after
    broker.kill()
    broker.start()
    assert read_partition(broker) == after
