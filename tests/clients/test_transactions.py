"""Transactions (exactly-once) through librdkafka (confluent-kafka 2.16) on one broker:
commits and aborts across 2 topics / 6 partitions checked record by record against a model of
each partition's log (records, then one offset per control marker), the last stable offset of
an open transaction (admin ListOffsets with an isolation level, watermarks, the consumer's
position), consume-transform-produce with send_offsets_to_transaction (one aborted transaction
rewound to the committed offsets), zombie fencing, and kcat reading read_committed.

librdkafka's default isolation.level is read_committed: every read_uncommitted read here says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from oxbow_harness import admin_client, consume_all, consumer_config, create_topic, wait_until

#: One broker, transactions on: __transaction_state and __consumer_offsets with one replica.
TXN_BROKER = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "transaction.max.timeout.ms": "120000",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
}

KCAT = shutil.which("kcat") or "/usr/bin/kcat"


def tx_producer(broker, txn_id: str, **extra) -> Producer:
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "transactional.id": txn_id,
        "transaction.timeout.ms": 60000,
        "linger.ms": 5,
        "socket.timeout.ms": 10000,
    }
    conf.update(extra)
    return Producer(conf)


def read(broker, topic: str, partitions, isolation: str) -> dict[int, list[tuple[int, str, str]]]:
    """partition -> [(offset, key, value)] from the beginning to the end the isolation level
    allows (librdkafka's EOF: the high watermark, or the last stable offset)."""
    got = consume_all(broker, topic, partitions, timeout=60, **{"isolation.level": isolation})
    return {p: [(r.offset, r.key.decode(), r.value.decode()) for r in recs] for p, recs in got.items()}


def list_latest(broker, tps: list[tuple[str, int]], isolation: IsolationLevel) -> dict[tuple[str, int], int]:
    """Admin ListOffsets(latest) at `isolation`: the high watermark, or the last stable offset."""
    adm = admin_client(broker)
    futs = adm.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in tps},
                            isolation_level=isolation, request_timeout=30)
    return {(tp.topic, tp.partition): f.result(timeout=40).offset for tp, f in futs.items()}


def watermark_high(broker, topic: str, partition: int, isolation: str) -> int:
    """consumer.get_watermark_offsets()'s high mark from a consumer at `isolation` (librdkafka
    sends its ListOffsets at the consumer's isolation level)."""
    c = Consumer(consumer_config(broker, **{"isolation.level": isolation}))
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)[1]
    finally:
        c.close()


def kafka_error(exc: KafkaException) -> KafkaError:
    err = exc.args[0]
    assert isinstance(err, KafkaError), exc
    return err


# ----------------------------------------------------------------------------------------------
# 1. commit and abort across 6 partitions, and an open transaction
# ----------------------------------------------------------------------------------------------

TOPICS = ("txn-a", "txn-b")


def everywhere(n: int) -> dict[tuple[str, int], int]:
    return {(t, p): n for t in TOPICS for p in range(3)}


#: (commit?, records per partition) in order; several transactions put hundreds of records in
#: one partition (many batches with batch.num.messages=64).
PLAN = [
    (True, everywhere(2)),
    (False, everywhere(3)),
    (True, {("txn-a", 0): 300, ("txn-b", 1): 200, ("txn-b", 2): 1}),
    (False, {("txn-a", 0): 250, ("txn-a", 2): 150, ("txn-b", 0): 1}),
    (True, {("txn-a", 1): 3, ("txn-b", 0): 3, ("txn-b", 2): 3}),
    (False, everywhere(5)),
    (True, {("txn-a", 2): 2, ("txn-b", 1): 120}),
    (True, everywhere(3)),
]
#: Left open, then committed.
OPEN = {("txn-a", 0): 4, ("txn-b", 1): 6}


def run_txn(p: Producer, t: int, counts: dict, model: "LogModel", outcome: str) -> None:
    """Sends transaction `t`'s records, checks their offsets from the delivery reports against
    the model, and leaves the transaction open (outcome 'open'), commits or aborts it."""
    reports: dict[tuple[str, int, str], tuple[int, KafkaError | None]] = {}

    def on_delivery(err, msg):
        reports[(msg.topic(), msg.partition(), msg.key().decode())] = (msg.offset(), err)

    p.begin_transaction()
    want = {}
    for (topic, part), n in counts.items():
        for i in range(n):
            key = f"k{t}-{i}"
            value = f"v{t}-{topic}-{part}-{i}-{outcome}"
            p.produce(topic, key=key, value=value, partition=part, on_delivery=on_delivery)
            want[(topic, part, key)] = model.append(topic, part, key, value, committed=outcome == "commit")
        p.poll(0)
    # abort_transaction() purges what is not sent yet: flush so that every record of every
    # transaction, aborted ones too, is in the log (read_uncommitted sees them).
    assert p.flush(60) == 0
    got = {k: off for k, (off, err) in reports.items()}
    errors = {k: err for k, (off, err) in reports.items() if err is not None}
    assert not errors, f"transaction {t}: delivery errors {list(errors.items())[:5]}"
    assert got == want, f"transaction {t}: offsets differ from the model"
    if outcome == "commit":
        p.commit_transaction(60)
    elif outcome == "abort":
        p.abort_transaction(60)
    if outcome != "open":
        for tp in counts:
            model.marker(*tp)


class LogModel:
    """What each partition's log must hold: a transaction's records at consecutive offsets,
    then one offset for its COMMIT or ABORT marker."""

    def __init__(self, tps) -> None:
        self.next = {tp: 0 for tp in tps}
        self.markers = {tp: 0 for tp in tps}
        self.all = {tp: [] for tp in tps}
        self.committed = {tp: [] for tp in tps}

    def append(self, topic, part, key, value, committed: bool) -> int:
        tp = (topic, part)
        off = self.next[tp]
        self.next[tp] += 1
        self.all[tp].append((off, key, value))
        if committed:
            self.committed[tp].append((off, key, value))
        return off

    def marker(self, topic, part) -> None:
        self.next[(topic, part)] += 1
        self.markers[(topic, part)] += 1


def test_commit_and_abort_across_six_partitions_and_an_open_transaction(broker_factory):
    """One producer, PLAN's 8 transactions alternately committed and aborted, then one left
    open and committed last. Each record's offset (delivery report), every partition's
    read_committed and read_uncommitted records (offset, key, value) and its high watermark and
    last stable offset (admin ListOffsets at both isolation levels, get_watermark_offsets from a
    consumer at each) match the model exactly."""
    broker = broker_factory(TXN_BROKER)
    for t in TOPICS:
        create_topic(broker, t, 3)
    tps = [(t, p) for t in TOPICS for p in range(3)]
    model = LogModel(tps)
    p = tx_producer(broker, "rd-txn-multi", **{"batch.num.messages": 64})
    p.init_transactions(60)
    for t, (commit, counts) in enumerate(PLAN):
        run_txn(p, t, counts, model, "commit" if commit else "abort")

    def check_reads(where: str) -> None:
        for topic in TOPICS:
            committed = read(broker, topic, range(3), "read_committed")
            everything = read(broker, topic, range(3), "read_uncommitted")
            for part in range(3):
                assert committed[part] == model.committed[(topic, part)], \
                    f"{where}: read_committed records of {topic}[{part}]"
                assert everything[part] == model.all[(topic, part)], \
                    f"{where}: read_uncommitted records of {topic}[{part}]"

    # Every transaction is complete: high watermark = last stable offset = records + markers.
    # commit_transaction() returns once the coordinator has decided; the markers follow.
    wait_until(lambda: list_latest(broker, tps, IsolationLevel.READ_COMMITTED) == model.next, 30,
               "last stable offsets at the end of every partition after the last commit")
    assert list_latest(broker, tps, IsolationLevel.READ_UNCOMMITTED) == model.next
    for topic, part in tps:
        assert watermark_high(broker, topic, part, "read_committed") == model.next[(topic, part)]
        assert watermark_high(broker, topic, part, "read_uncommitted") == model.next[(topic, part)]
    check_reads("all complete")

    # One transaction left open: the last stable offset of the partitions it wrote stays at its
    # first offset, the high watermark moves on; the others are unaffected.
    lso_before = dict(model.next)
    run_txn(p, len(PLAN), OPEN, model, "open")
    hw = dict(model.next)
    want_lso = {tp: (lso_before[tp] if tp in OPEN else hw[tp]) for tp in tps}
    assert list_latest(broker, tps, IsolationLevel.READ_COMMITTED) == want_lso, "LSO with an open transaction"
    assert list_latest(broker, tps, IsolationLevel.READ_UNCOMMITTED) == hw, "high watermark with an open transaction"
    for topic, part in OPEN:
        assert watermark_high(broker, topic, part, "read_committed") == want_lso[(topic, part)]
        assert watermark_high(broker, topic, part, "read_uncommitted") == hw[(topic, part)]
    check_reads("one transaction open")

    # A read_committed consumer at the end of an open transaction's partition: no record of it
    # arrives, however long it polls.
    c = Consumer(consumer_config(broker, **{"isolation.level": "read_committed"}))
    c.assign([TopicPartition("txn-a", 0, OFFSET_BEGINNING)])
    seen, eof = [], False
    deadline = time.monotonic() + 30
    while not eof and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            eof = True
            continue
        seen.append(m.offset())
    assert eof, "read_committed consumer reached no EOF"
    for _ in range(6):
        m = c.poll(0.25)
        assert m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF), \
            f"read_committed got {m.offset() if m and not m.error() else m.error()} of an open transaction"
    assert seen == [o for o, _, _ in model.committed[("txn-a", 0)]]
    # Its position moved past the last COMMIT marker, to the LSO.
    position = c.position([TopicPartition("txn-a", 0)])[0].offset
    print(f"\nread_committed position at txn-a[0]'s EOF with a transaction open: {position} "
          f"(last committed record {seen[-1]}, LSO {want_lso[('txn-a', 0)]}, HW {hw[('txn-a', 0)]})")
    assert position == want_lso[("txn-a", 0)]

    # Committed: the marker follows and the LSO reaches the high watermark; the consumer that
    # waited gets the records of the transaction.
    for tp, recs in model.all.items():
        model.committed[tp] = [r for r in recs if r[2].endswith(("-commit", "-open"))]
    p.commit_transaction(60)
    for tp in OPEN:
        model.marker(*tp)
    wait_until(lambda: list_latest(broker, tps, IsolationLevel.READ_COMMITTED) == model.next, 30,
               "last stable offsets at the end of every partition after the open transaction committed")
    assert list_latest(broker, tps, IsolationLevel.READ_UNCOMMITTED) == model.next
    late = []
    deadline = time.monotonic() + 30
    while len(late) < OPEN[("txn-a", 0)] and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            late.append((m.offset(), m.key().decode(), m.value().decode()))
    c.close()
    assert late == [r for r in model.all[("txn-a", 0)] if r[2].endswith("-open")]
    check_reads("all committed")
    total = sum(len(v) for v in model.all.values())
    committed = sum(len(v) for v in model.committed.values())
    markers = sum(model.markers.values())
    print(f"{len(PLAN) + 1} transactions: {committed} committed records of {total} in 6 partitions, "
          f"{markers} markers")


# ----------------------------------------------------------------------------------------------
# 2. consume-transform-produce
# ----------------------------------------------------------------------------------------------

CTP_RECORDS = 3000
CTP_PARTITIONS = 3
CTP_PER_TXN = 100
CTP_ABORTED_TXN = 4


def test_consume_transform_produce_commits_offsets_in_the_transaction(broker_factory):
    """Input N records -> output exactly N (per partition, in input order) read_committed; the
    group's committed offsets equal the input's end offsets. The fifth transaction is aborted
    after its records are in the log and the consumer rewinds to the committed offsets: the
    aborted records are there read_uncommitted and nowhere read_committed."""
    broker = broker_factory(TXN_BROKER)
    create_topic(broker, "ctp-in", CTP_PARTITIONS)
    create_topic(broker, "ctp-out", CTP_PARTITIONS)
    src = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(CTP_RECORDS):
        src.produce("ctp-in", key=f"k{i}", value=f"v{i}", partition=i % CTP_PARTITIONS)
    assert src.flush(60) == 0
    inputs = read(broker, "ctp-in", range(CTP_PARTITIONS), "read_uncommitted")
    ends = {p: len(recs) for p, recs in inputs.items()}
    assert ends == {p: CTP_RECORDS // CTP_PARTITIONS for p in range(CTP_PARTITIONS)}

    p = tx_producer(broker, "rd-ctp")
    p.init_transactions(60)
    c = Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": "rd-ctp-group",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
    })
    c.subscribe(["ctp-in"])
    txns, aborted_records, in_txn = 0, 0, 0
    committed_view: dict[int, int] = {}
    p.begin_transaction()
    deadline = time.monotonic() + 120
    while committed_view != ends:
        assert time.monotonic() < deadline, f"committed offsets {committed_view}, want {ends}"
        for m in c.consume(200, 0.2):
            assert not m.error(), m.error()
            p.produce("ctp-out", key=m.key(), value=b"T:" + m.value(), partition=m.partition())
            in_txn += 1
        if in_txn == 0 or (in_txn < CTP_PER_TXN and sum(ends.values()) - sum(committed_view.values()) > in_txn):
            continue
        if txns == CTP_ABORTED_TXN:
            assert p.flush(60) == 0
            p.abort_transaction(60)
            aborted_records += in_txn
            # Rewind to what the group has committed (the aborted transaction's offsets were
            # never committed).
            for tp in c.committed(c.assignment(), timeout=30):
                c.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        else:
            positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
            p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 60)
            p.commit_transaction(60)
        txns += 1
        in_txn = 0
        p.begin_transaction()
        committed_view = {tp.partition: tp.offset for tp in c.committed(c.assignment(), timeout=30)}
    p.abort_transaction(60)  # the last, empty one
    c.close()

    out = read(broker, "ctp-out", range(CTP_PARTITIONS), "read_committed")
    everything = read(broker, "ctp-out", range(CTP_PARTITIONS), "read_uncommitted")
    out_n = sum(len(v) for v in out.values())
    all_n = sum(len(v) for v in everything.values())
    print(f"\nconsume-transform-produce: {CTP_RECORDS} in, {out_n} out read_committed, {all_n} read_uncommitted "
          f"({aborted_records} in the aborted transaction), {txns} transactions")
    for part in range(CTP_PARTITIONS):
        assert [(k, v) for _, k, v in out[part]] == [(k, "T:" + v) for _, k, v in inputs[part]], \
            f"ctp-out[{part}] read_committed is not the input transformed, exactly once"
    assert aborted_records > 0 and all_n == CTP_RECORDS + aborted_records
    # The group's offsets, read by a fresh member of the group (OffsetFetch).
    fresh = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rd-ctp-group", "enable.auto.commit": False})
    stored = fresh.committed([TopicPartition("ctp-in", q) for q in range(CTP_PARTITIONS)], timeout=30)
    fresh.close()
    assert {tp.partition: tp.offset for tp in stored} == ends


# ----------------------------------------------------------------------------------------------
# 3. zombie fencing
# ----------------------------------------------------------------------------------------------


def test_second_instance_fences_the_first_and_aborts_its_transaction(broker_factory, capfd):
    """Two producers with one transactional.id. The second's init_transactions aborts the
    first's open transaction (its records: ABORT); the first, a zombie now, fails fatally with
    _FENCED: at its next Produce (the broker's answer is named in the error), or at
    commit_transaction() when it goes straight there (EndTxn)."""
    broker = broker_factory(TXN_BROKER)
    create_topic(broker, "txn-fence", 2)
    outcomes = {}
    for case, part in (("produce", 0), ("commit", 1)):
        # debug=eos: librdkafka logs each EndTxn answer to stderr (read with capfd; a Python
        # `logger` callback cannot be used: confluent-kafka runs callbacks after it has raised
        # the fatal error, and they fail with SystemError).
        zombie = tx_producer(broker, f"rd-fence-{case}", debug="eos")
        zombie.init_transactions(60)
        zombie.begin_transaction()
        for i in range(3):
            zombie.produce("txn-fence", key=f"z{i}", value=f"zombie-{case}-{i}", partition=part)
        assert zombie.flush(30) == 0
        fresh = tx_producer(broker, f"rd-fence-{case}")
        fresh.init_transactions(60)
        raised = []
        if case == "produce":
            zombie.produce("txn-fence", key="z3", value=f"zombie-{case}-3", partition=part)
            # The fatal error surfaces as an exception from flush() (confluent-kafka raises a
            # fatal error from poll/flush; a delivery callback then would meet the pending
            # exception, hence none here).
            with pytest.raises(KafkaException) as at_flush:
                zombie.flush(30)
            raised.append(("flush", kafka_error(at_flush.value)))
        with pytest.raises(KafkaException) as at_commit:
            zombie.commit_transaction(30)
        raised.append(("commit_transaction", kafka_error(at_commit.value)))
        stderr = capfd.readouterr().err
        end_txn = re.findall(r"EndTxn returned (\w+)", stderr)
        outcomes[case + " EndTxn"] = end_txn
        outcomes[case] = [(where, e.name(), e.fatal(), e.txn_requires_abort(), e.str()) for where, e in raised]
        fresh.begin_transaction()
        for i in range(2):
            fresh.produce("txn-fence", key=f"f{i}", value=f"fresh-{case}-{i}", partition=part)
        fresh.commit_transaction(60)
    for case in ("produce", "commit"):
        for o in outcomes[case]:
            print(f"\nzombie ({case}): {o[0]} raised {o[1]} fatal={o[2]} abortable={o[3]}: {o[4]}")
        print(f"zombie ({case}): EndTxn answers in librdkafka's log: {outcomes[case + ' EndTxn']}")
    # The zombie's 3 records (0..2) were aborted (marker at 3) by the fresh instance's
    # initialization; its late record never got in; the fresh records are 4, 5, COMMIT at 6.
    wait_until(lambda: list_latest(broker, [("txn-fence", 0), ("txn-fence", 1)], IsolationLevel.READ_COMMITTED)
               == {("txn-fence", 0): 7, ("txn-fence", 1): 7}, 30, "last stable offsets after the fresh commits")
    committed = read(broker, "txn-fence", range(2), "read_committed")
    everything = read(broker, "txn-fence", range(2), "read_uncommitted")
    for case, part in (("produce", 0), ("commit", 1)):
        zombie_recs = [(i, f"z{i}", f"zombie-{case}-{i}") for i in range(3)]
        fresh_recs = [(4 + i, f"f{i}", f"fresh-{case}-{i}") for i in range(2)]
        assert committed[part] == fresh_recs, f"txn-fence[{part}] read_committed"
        assert everything[part] == zombie_recs + fresh_recs, f"txn-fence[{part}] read_uncommitted"
    # Kafka 4.1.1 answers the zombie's Produce with INVALID_PRODUCER_EPOCH ("Producer attempted
    # an operation with an old epoch"); librdkafka turns it into a fatal _FENCED, which
    # commit_transaction() raises again.
    produce_fenced = [(w, n, f, a) for w, n, f, a, _ in outcomes["produce"]]
    assert produce_fenced == [("flush", "_FENCED", True, False), ("commit_transaction", "_FENCED", True, False)], outcomes
    for _, _, _, _, text in outcomes["produce"]:
        assert "Broker: Producer attempted an operation with an old epoch" in text, text
    # A zombie fenced by Produce never sends EndTxn; one that goes straight to commit gets
    # INVALID_PRODUCER_EPOCH for its EndTxn from Kafka 4.1.1 (not PRODUCER_FENCED), which
    # librdkafka turns into a fatal _FENCED.
    assert outcomes["produce EndTxn"] == []
    commit_fenced = [(w, n, f, a) for w, n, f, a, _ in outcomes["commit"]]
    assert commit_fenced == [("commit_transaction", "_FENCED", True, False)], outcomes
    assert outcomes["commit EndTxn"] == ["INVALID_PRODUCER_EPOCH"], outcomes


# ----------------------------------------------------------------------------------------------
# 4. kcat read_committed
# ----------------------------------------------------------------------------------------------


def test_kcat_reads_committed_records_only(broker_factory):
    """kcat (librdkafka 2.0.2) with -X isolation.level=read_committed: committed records only,
    and with -e it stops at the last stable offset while a transaction is open."""
    broker = broker_factory(TXN_BROKER)
    create_topic(broker, "txn-kcat", 1)
    p = tx_producer(broker, "rd-kcat")
    p.init_transactions(60)
    for outcome in ("commit", "abort", "commit", "open"):
        p.begin_transaction()
        for i in range(5):
            p.produce("txn-kcat", key=f"{outcome}-{i}", value=f"{outcome}", partition=0)
        assert p.flush(30) == 0
        if outcome == "commit":
            p.commit_transaction(60)
        elif outcome == "abort":
            p.abort_transaction(60)

    def kcat(isolation: str) -> list[str]:
        proc = subprocess.run([KCAT, "-C", "-b", broker.bootstrap, "-t", "txn-kcat", "-p", "0", "-o", "beginning",
                               "-e", "-q", "-X", f"isolation.level={isolation}", "-f", "%o %k\\n"],
                              capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
        return proc.stdout.decode().splitlines()

    # offsets: commit 0-4 (marker 5), abort 6-10 (11), commit 12-16 (17), open 18-22
    committed = [f"{o} commit-{i}" for o, i in zip(range(0, 5), range(5))] + \
                [f"{o} commit-{i}" for o, i in zip(range(12, 17), range(5))]
    wait_until(lambda: kcat("read_committed") == committed, 30, "kcat read_committed sees the two committed transactions")
    got = kcat("read_uncommitted")
    assert got == committed[:5] + [f"{o} abort-{i}" for o, i in zip(range(6, 11), range(5))] + committed[5:] + \
        [f"{o} open-{i}" for o, i in zip(range(18, 23), range(5))]
    p.commit_transaction(60)
    want = committed + [f"{o} open-{i}" for o, i in zip(range(18, 23), range(5))]
    wait_until(lambda: kcat("read_committed") == want, 30, "kcat read_committed after the open transaction committed")
    print(f"\nkcat read_committed: {len(want)} records of {len(got)}")
