"""kill -9 while an idempotent acks=all producer is writing: count what was lost.

The broker runs with log.flush.interval.messages=1, so an acknowledged record
is on disk before the ack. Every acknowledged record must be read back exactly
once, in send order per partition. Records whose delivery failed may or may
not be present (never counted as lost), but none may appear twice.
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time

from confluent_kafka import Producer

from oxbow_harness import consume_all, create_topic, wait_until

PARTITIONS = 4
KILLS = 5
TOPIC = "crash-topic"
MAX_IN_FLIGHT = 1000      # produced but not yet reported
MAX_RECORDS = 200_000     # hard cap on the producer loop
PRODUCER_DEADLINE_S = 150


def test_kill9_during_idempotent_produce(broker_factory):
    seed = int(os.environ.get("OXBOW_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"crash test seed {seed} (set OXBOW_CRASH_SEED to replay the kill points)")

    broker = broker_factory({"log.flush.interval.messages": "1"})
    create_topic(broker, TOPIC, PARTITIONS)

    acked: dict[int, tuple[int, int]] = {}   # seq -> (partition, offset)
    failed: dict[int, str] = {}
    client_errors: list[str] = []
    fatal_errors: list[str] = []

    def on_delivery(err, msg):
        seq = int(msg.value())
        if err is None:
            acked[seq] = (msg.partition(), msg.offset())
        else:
            failed[seq] = str(err)

    def on_error(err):
        client_errors.append(str(err))
        if err.fatal():
            fatal_errors.append(str(err))

    producer = Producer({
        "bootstrap.servers": broker.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 2,
        "message.timeout.ms": 30000,
        "retries": 1_000_000,
        "retry.backoff.ms": 50,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "error_cb": on_error,
    })

    stop = threading.Event()
    sent = [0]
    thread_error: list[BaseException] = []

    def produce_loop():
        try:
            seq = 0
            deadline = time.monotonic() + PRODUCER_DEADLINE_S
            while not stop.is_set() and seq < MAX_RECORDS and time.monotonic() < deadline:
                if fatal_errors:
                    break
                if seq - (len(acked) + len(failed)) >= MAX_IN_FLIGHT:
                    producer.poll(0.02)
                    continue
                try:
                    producer.produce(TOPIC, value=b"%d" % seq, partition=seq % PARTITIONS,
                                     on_delivery=on_delivery)
                except BufferError:
                    producer.poll(0.05)
                    continue
                seq += 1
                sent[0] = seq
                producer.poll(0)
        except BaseException as e:  # surfaced by the main thread
            thread_error.append(e)

    worker = threading.Thread(target=produce_loop, name="crash-producer", daemon=True)
    worker.start()
    kill_log = []
    try:
        for k in range(KILLS):
            target = len(acked) + rng.randint(200, 800)
            wait_until(lambda: len(acked) >= target or not worker.is_alive(), 60,
                       f"{target} acknowledged records before kill #{k + 1} "
                       f"(acked {len(acked)}, failed {len(failed)}, sent {sent[0]}, "
                       f"client errors {client_errors[-3:]})", interval=0.01)
            assert worker.is_alive(), f"producer loop ended early: {thread_error or fatal_errors}"
            kill_log.append((len(acked), sent[0]))
            broker.kill()
            broker.start()
        # Producing must resume after the last restart.
        target = len(acked) + 500
        wait_until(lambda: len(acked) >= target or not worker.is_alive(), 60,
                   f"{target} acknowledged records after the last restart "
                   f"(acked {len(acked)}, client errors {client_errors[-3:]})", interval=0.01)
    finally:
        stop.set()
        worker.join(30)
    assert not worker.is_alive(), "producer thread did not stop"
    assert not thread_error, f"producer thread raised: {thread_error[0]!r}"
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records neither delivered nor failed after flush(60)"

    broker.stop()
    broker.start()
    records = consume_all(broker, TOPIC, range(PARTITIONS), timeout=120)

    total_sent = sent[0]
    counts = collections.Counter()
    offset_gaps = []
    order_violations = []
    wrong_partition = []
    wrong_offset = []
    for p, recs in records.items():
        offsets = [r.offset for r in recs]
        if offsets != list(range(len(recs))):
            offset_gaps.append(p)
        last_acked = -1
        for r in recs:
            seq = int(r.value)
            counts[seq] += 1
            if seq % PARTITIONS != p:
                wrong_partition.append(seq)
            if seq in acked:
                if seq < last_acked:
                    order_violations.append((p, last_acked, seq))
                last_acked = seq
                rp, roff = acked[seq]
                if roff >= 0 and (rp, roff) != (p, r.offset):
                    wrong_offset.append((seq, (rp, roff), (p, r.offset)))
    lost = sorted(s for s in acked if counts[s] == 0)
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    unacked_present = sum(1 for s in counts if s not in acked)
    never_reported = total_sent - len(acked) - len(failed)

    print(
        f"kills={KILLS} at (acked, sent)={kill_log}; sent={total_sent} acked={len(acked)} "
        f"failed={len(failed)} never_reported={never_reported} read_back={sum(counts.values())} "
        f"lost={len(lost)} duplicates={duplicates} unacked_but_present={unacked_present} "
        f"order_violations={len(order_violations)} fatal_errors={fatal_errors}"
    )
    if failed:
        print(f"sample delivery failures: {list(failed.items())[:5]}")

    assert kill_log and len(kill_log) == KILLS
    assert never_reported == 0
    assert not lost, f"LOST {len(lost)} acknowledged records, e.g. seq {lost[:20]}"
    assert duplicates == 0, \
        f"{duplicates} duplicate records, e.g. {[s for s, c in counts.items() if c > 1][:20]}"
    assert not wrong_partition, f"records in the wrong partition: {wrong_partition[:20]}"
    assert not order_violations, f"acknowledged records out of send order: {order_violations[:10]}"
    assert not offset_gaps, f"partitions whose offsets are not contiguous from 0: {offset_gaps}"
    assert not wrong_offset, f"delivery report offset differs from log offset: {wrong_offset[:10]}"
    assert not fatal_errors, f"idempotent producer hit fatal errors: {fatal_errors}"
