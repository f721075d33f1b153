"""Exactly-once through crashes on 3 nodes (tests/clients/oxbow_cluster.py), every topic with 3
replicas and min.insync.replicas 2, __transaction_state and __consumer_offsets too.

A chain of two consume-transform-produce stages, each its own process (eos_stage.py:
read_committed consumer in its own group, transactional producer, send_offsets_to_transaction,
a commit every 100 records):

    input (6 partitions) -> stage A -> mid -> stage B -> output

while an idempotent producer writes 20,000 records with unique keys to `input`. Meanwhile each
stage is SIGKILLed once with a transaction open whose records are in the log, and started again
with the same transactional.id; then the broker that coordinates stage A's transactional id is
SIGKILLed, stage B with it (at whatever point it is), and the broker is started again once both
stages commit on the two others. At the end a read_committed reader of `mid` and of `output`
sees every input record exactly once, in each partition in input order (counts printed: input,
output, missing, duplicated); read_uncommitted shows the aborted records the kills left behind.

Every wait is bounded; timings are printed, never asserted.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from oxbow_cluster import Cluster
from oxbow_harness import consume_all, require_broker_binary, wait_until

RECORDS = 20_000
PARTITIONS = 6
TXN_PARTITIONS = 5
STAGE_SCRIPT = Path(__file__).resolve().parent / "eos_stage.py"

CLUSTER = {
    "replica.lag.time.max.ms": "5000",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "5",  # java_partition_for(group, 5) below
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "transaction.max.timeout.ms": "120000",
    "group.initial.rebalance.delay.ms": "0",
}

#: name -> (input topic, output topic, value tag, transactional id, hang after commits)
STAGES = {
    "A": ("input", "mid", "|A", "eos-stage-a", 5),
    "B": ("mid", "output", "|B", "eos-stage-b", 8),
}


def java_partition_for(key: str, partitions: int) -> int:
    """Kafka's coordinator partition: Utils.abs(key.hashCode()) % partitions (String.hashCode
    over UTF-16 code units, 32-bit overflow). As test_groups.py computes it for groups."""
    units = key.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class Stage:
    """One eos_stage.py process; its output (and librdkafka's) goes to a log file whose tail is
    attached to a failing report, like a broker's."""

    def __init__(self, name: str, root: Path, bootstrap: str) -> None:
        self.name = name
        self.input, self.output, self.tag, self.txn_id, self.hang_after = STAGES[name]
        self.group = ""  # chosen by the test once the internal topics exist
        self.log_path = root / f"stage-{name}.log"
        self.bootstrap = bootstrap
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, hang: bool) -> None:
        self.starts += 1
        cmd = [sys.executable, str(STAGE_SCRIPT), "--bootstrap", self.bootstrap, "--input", self.input,
               "--output", self.output, "--group", self.group, "--txn-id", self.txn_id, "--tag", self.tag,
               "--per-txn", "100", "--hang-after", str(self.hang_after if hang else -1)]
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== [test {time.strftime('%H:%M:%S')}] start #{self.starts} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def lines(self) -> list[str]:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [l.split(" ", 2)[2] for l in text.splitlines() if l.startswith("STAGE ")]

    def commits(self) -> int:
        """Transactions committed, over every run of the stage."""
        return sum(1 for l in self.lines() if l.startswith("commit "))

    def check_alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(f"stage {self.name} exited with {self.proc.returncode}:\n{self.log_tail(60)}", pytrace=False)
        return True

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        with open(self.log_path, "ab") as log:
            log.write(f"===== [test {time.strftime('%H:%M:%S')}] SIGKILL =====\n".encode())

    def stop(self) -> None:
        self.check_alive()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.close()
            pytest.fail(f"stage {self.name} did not stop within 90s of SIGTERM:\n{self.log_tail(60)}", pytrace=False)
        assert rc == 0, f"stage {self.name} exited {rc}:\n{self.log_tail(60)}"

    def close(self) -> None:
        """Teardown: a Python stack dump into the log (SIGUSR1), then SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class Input:
    """An idempotent acks=all producer writing RECORDS keyed records (record i to partition
    i % PARTITIONS) at a bounded rate, in a thread."""

    def __init__(self, bootstrap: str, per_second: int) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 5, "message.timeout.ms": 180000})
        self.per_second = per_second
        self.acked = 0
        self.failed: list[str] = []
        self.sent = 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.error: list[BaseException] = []

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed.append(f"{msg.key()}: {err}")

    def run(self) -> None:
        try:
            t0 = time.monotonic()
            while self.sent < RECORDS:
                due = min(RECORDS, int((time.monotonic() - t0) * self.per_second) + 100)
                while self.sent < due:
                    i = self.sent
                    self.p.produce("input", key=f"k{i:05d}", value=f"v{i}", partition=i % PARTITIONS,
                                   on_delivery=self._done)
                    self.sent += 1
                self.p.poll(0.05)
            self.p.flush(200)
        except BaseException as e:  # surfaced by the test
            self.error.append(e)


def replicas(adm: AdminClient, topic: str) -> dict[int, tuple[int, list[int]]]:
    md = adm.list_topics(topic, timeout=10).topics[topic]
    if md.error is not None:
        raise KafkaException(md.error)
    return {p: (md.partitions[p].leader, sorted(md.partitions[p].isrs)) for p in md.partitions}


def all_in_sync(adm: AdminClient, topics: list[str]) -> bool:
    try:
        return all(leader > 0 and isr == [1, 2, 3] for t in topics for leader, isr in replicas(adm, t).values())
    except KafkaException:
        return False


def committed_offsets(reader: Consumer, topic: str) -> dict[int, int]:
    try:
        got = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    except KafkaException:
        return {}
    return {tp.partition: tp.offset for tp in got}


def latest(adm: AdminClient, topic: str, isolation: IsolationLevel) -> dict[int, int]:
    """Admin ListOffsets(latest): the high watermarks, or the last stable offsets."""
    try:
        futs = adm.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)},
                                isolation_level=isolation, request_timeout=10)
        return {tp.partition: f.result(timeout=15).offset for tp, f in futs.items()}
    except KafkaException:
        return {}


def values(records: dict) -> dict[int, list[tuple[str, str]]]:
    return {p: [(r.key.decode(), r.value.decode()) for r in recs] for p, recs in records.items()}


def test_exactly_once_chain_through_stage_and_coordinator_kills(request, tmp_path):
    cluster = Cluster(require_broker_binary(), tmp_path, 3, 0, CLUSTER)
    stages = {name: Stage(name, tmp_path, ",".join(n.bootstrap for n in cluster.nodes)) for name in STAGES}
    request.node._oxbow_brokers = cluster.nodes + list(stages.values())
    cluster.start()
    t_start = time.monotonic()
    events: list[str] = []

    def event(text: str) -> None:
        events.append(f"{time.monotonic() - t_start:6.1f}s {text}")
        print(events[-1], flush=True)

    try:
        bootstrap = cluster.bootstrap()
        adm = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
        futs = adm.create_topics([NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"})
                                  for t in ("input", "mid", "output")], operation_timeout=30)
        for f in futs.values():
            f.result(timeout=40)
        wait_until(lambda: all_in_sync(adm, ["input", "mid", "output"]), 60, "3 in-sync replicas everywhere")

        # The internal topics (3 replicas each) exist before the stages start: the broker to
        # kill (the coordinator of stage A's transactional id) is known from the start, and
        # each stage's group is one whose coordinator is elsewhere. librdkafka 2.16 decommissions
        # a broker that leaves the metadata; when that broker was the group coordinator it
        # cached, send_offsets_to_transaction() can block past its timeout (its TxnOffsetCommit
        # is never sent: librdkafka issues #5456 and #5511). Seen against Kafka 4.1.1 with the
        # group's coordinator on the killed broker: stage A stuck for 90 s in 1 run of 4.
        warm = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-warmup"})
        warm.init_transactions(60)
        warm_group = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-warmup"})
        wait_until(lambda: committed_offsets(warm_group, "input") != {}, 60, "an OffsetFetch answered")
        warm_group.close()
        wait_until(lambda: all_in_sync(adm, ["__transaction_state", "__consumer_offsets"]), 60,
                   "internal topics with 3 in-sync replicas")
        a = stages["A"]
        txn_part = java_partition_for(a.txn_id, TXN_PARTITIONS)
        coordinator = replicas(adm, "__transaction_state")[txn_part][0]
        group_leaders = replicas(adm, "__consumer_offsets")
        for s in stages.values():
            s.group = next(g for g in (f"eos-group-{s.name.lower()}-{i}" for i in range(100))
                           if group_leaders[java_partition_for(g, 5)][0] != coordinator)
        event(f"node {coordinator} coordinates {a.txn_id} (__transaction_state[{txn_part}]); groups "
              f"{[(s.group, group_leaders[java_partition_for(s.group, 5)][0]) for s in stages.values()]}")

        feed = Input(bootstrap, per_second=500)
        feed.t.start()
        for s in stages.values():
            s.start(hang=True)
        readers = {name: Consumer({"bootstrap.servers": bootstrap, "group.id": s.group, "enable.auto.commit": False})
                   for name, s in stages.items()}

        def alive() -> bool:
            return all(s.check_alive() for s in stages.values() if s.proc is not None) and not feed.error

        # 1. Each stage SIGKILLed with a transaction open (its records flushed to the log), and
        #    started again with the same transactional.id.
        for s in stages.values():
            wait_until(lambda: alive() and any(l.startswith("hang ") for l in s.lines()), 180,
                       f"stage {s.name} holding a transaction open after {s.hang_after} commits")
            hung = [l for l in s.lines() if l.startswith("hang ")][-1]
            s.kill()
            event(f"stage {s.name} SIGKILLed after {s.commits()} commits, {hung.split()[1]} records in its open "
                  f"transaction; input acked {feed.acked}")
            s.start(hang=False)
        for s in stages.values():
            before = s.commits()
            wait_until(lambda: alive() and s.commits() >= before + 5, 180, f"stage {s.name} committing after its restart")
            event(f"stage {s.name} restarted: {s.commits()} commits")

        # 2. The broker coordinating stage A's transactional id SIGKILLed: stage A goes on with
        #    another coordinator; then the broker is started again and catches up.
        wait_until(lambda: all_in_sync(adm, ["__transaction_state", "__consumer_offsets"]), 60,
                   "internal topics fully in sync")
        assert replicas(adm, "__transaction_state")[txn_part][0] == coordinator
        victim = cluster.node(coordinator)
        before = a.commits()
        victim.kill()
        event(f"node {coordinator} (leader of __transaction_state[{txn_part}], coordinator of {a.txn_id}) SIGKILLed "
              f"after {before} commits of stage A; input acked {feed.acked}")
        # Stage B too, wherever it is (most likely inside a transaction), on two nodes.
        b = stages["B"]
        b.kill()
        b_before = b.commits()
        event(f"stage B SIGKILLed after {b_before} commits, last line {b.lines()[-1]!r}")
        b.start(hang=False)
        survivors = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in cluster.nodes if n is not victim)})
        wait_until(lambda: alive() and a.commits() >= before + 5, 180, "stage A committing without the killed coordinator")
        moved = replicas(survivors, "__transaction_state")[txn_part][0]
        event(f"stage A committed {a.commits() - before} transactions since; coordinator now node {moved}")
        wait_until(lambda: alive() and b.commits() >= b_before + 5, 180, "stage B committing after its restart on two nodes")
        event(f"stage B restarted on two nodes: {b.commits() - b_before} commits since")
        assert moved not in (coordinator, -1)
        victim.start()
        wait_until(lambda: alive() and all_in_sync(adm, ["input", "mid", "output", "__transaction_state",
                                                         "__consumer_offsets"]), 120,
                   f"node {coordinator} back in every ISR")
        event(f"node {coordinator} back in every ISR")

        # 3. Everything through: stage A's group committed the input's end offsets, stage B's
        #    the end of the last committed record of each `mid` partition.
        wait_until(lambda: alive() and feed.acked + len(feed.failed) == RECORDS, 240, "input written")
        assert not feed.failed, feed.failed[:5]
        input_end = {p: RECORDS // PARTITIONS + (1 if p < RECORDS % PARTITIONS else 0) for p in range(PARTITIONS)}
        wait_until(lambda: alive() and committed_offsets(readers["A"], "input") == input_end, 240,
                   f"stage A's committed offsets at the input's end {input_end}")
        event(f"stage A done: {a.commits()} commits")
        # commit_transaction() returns once the coordinator decided; the markers follow.
        wait_until(lambda: len(latest(adm, "mid", IsolationLevel.READ_COMMITTED)) == PARTITIONS and
                   latest(adm, "mid", IsolationLevel.READ_COMMITTED) == latest(adm, "mid", IsolationLevel.READ_UNCOMMITTED),
                   60, "no open transaction in mid (last stable offsets = high watermarks)")
        mid = consume_all(cluster.nodes[0], "mid", range(PARTITIONS), timeout=120)
        mid_last = {p: recs[-1].offset + 1 for p, recs in mid.items()}
        wait_until(lambda: alive() and all(o >= mid_last[p] for p, o in committed_offsets(readers["B"], "mid").items())
                   and len(committed_offsets(readers["B"], "mid")) == PARTITIONS, 240,
                   f"stage B's committed offsets past the last committed record of mid {mid_last}")
        b_committed = committed_offsets(readers["B"], "mid")
        event(f"stage B done: {stages['B'].commits()} commits, committed offsets {b_committed} "
              f"(after the last records {mid_last})")
        for s in stages.values():
            s.stop()
        for r in readers.values():
            r.close()

        # 4. Exactly once, in order.
        node = cluster.nodes[0]
        inputs = values(consume_all(node, "input", range(PARTITIONS), timeout=120))
        mids = values(consume_all(node, "mid", range(PARTITIONS), timeout=120))
        outs = values(consume_all(node, "output", range(PARTITIONS), timeout=120))
        mid_all = consume_all(node, "mid", range(PARTITIONS), timeout=120, **{"isolation.level": "read_uncommitted"})
        out_all = consume_all(node, "output", range(PARTITIONS), timeout=120, **{"isolation.level": "read_uncommitted"})
        keys_in = [k for recs in inputs.values() for k, _ in recs]
        counts = collections.Counter(k for recs in outs.values() for k, _ in recs)
        missing = sorted(set(keys_in) - set(counts))
        duplicated = sorted(k for k, n in counts.items() if n > 1)
        mid_n = sum(len(v) for v in mids.values())
        out_n = sum(len(v) for v in outs.values())
        mid_all_n = sum(len(v) for v in mid_all.values())
        out_all_n = sum(len(v) for v in out_all.values())
        print("\n" + "\n".join(events))
        print(f"input {len(keys_in)} ({len(set(keys_in))} keys), mid {mid_n} read_committed / {mid_all_n} "
              f"read_uncommitted, output {out_n} read_committed / {out_all_n} read_uncommitted; "
              f"output missing {len(missing)}, duplicated {len(duplicated)}; commits A {stages['A'].commits()}, "
              f"B {stages['B'].commits()}; aborts A {sum(l.startswith('abort') for l in stages['A'].lines())}, "
              f"B {sum(l.startswith('abort') for l in stages['B'].lines())}; total {time.monotonic() - t_start:.0f}s")
        assert len(keys_in) == RECORDS and len(set(keys_in)) == RECORDS
        assert not missing, f"{len(missing)} input keys missing from output, e.g. {missing[:10]}"
        assert not duplicated, f"{len(duplicated)} keys more than once in output, e.g. {duplicated[:10]}"
        for p in range(PARTITIONS):
            assert mids[p] == [(k, v + "|A") for k, v in inputs[p]], f"mid[{p}] is not input[{p}] exactly once, in order"
            assert outs[p] == [(k, v + "|A|B") for k, v in inputs[p]], \
                f"output[{p}] is not input[{p}] exactly once, in order"
        # The kills left aborted records behind (each stage's open transaction at least).
        assert mid_all_n >= mid_n + 30 and out_all_n >= out_n + 30, (mid_all_n, out_all_n)
    finally:
        for s in stages.values():
            s.close()
        cluster.close()
