"""One stage of test_eos_crash.py's exactly-once chain, run as its own process so that the test
can SIGKILL it mid-transaction and start it again with the same transactional.id, as a real
exactly-once application restarts.

A consume-transform-produce loop (librdkafka via confluent-kafka): a read_committed consumer in
its own group (subscribe), a transactional producer; each record goes to the same partition of
the output topic with `--tag` appended to its value; every `--per-txn` records (or 0.5 s) the
consumer's positions go into the transaction (send_offsets_to_transaction) and it commits.

What it prints on stdout, one line each, prefixed "STAGE": `start`, `ready` (after
init_transactions), `assigned`/`revoked`, `commit <n> records <total>` after each commit,
`abort <why>`, `hang <records>` (with --hang-after: after that many commits it flushes the
records of the next transaction and then sleeps, the transaction open, until killed), `fatal`,
`stopped`. SIGTERM: finish the current transaction, close, exit 0. A fatal error, or
ABORTS_IN_A_ROW aborted transactions without a commit, exits 3.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

API_TIMEOUT_S = 30
ATTEMPTS = 10  # of one transactional call that fails with a retriable error
ABORTS_IN_A_ROW = 20  # transactions aborted without a commit in between: the stage gives up (exit 4)


def say(line: str) -> None:
    print(f"STAGE {time.strftime('%H:%M:%S')} {line}", flush=True)


class Fatal(Exception):
    pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--txn-id", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--per-txn", type=int, default=100)
    ap.add_argument("--hang-after", type=int, default=-1)
    args = ap.parse_args()

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for a stack dump before a SIGKILL
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    say(f"start txn-id={args.txn_id} group={args.group} {args.input} -> {args.output}")

    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "transactional.id": args.txn_id,
        "transaction.timeout.ms": 60000,
        "linger.ms": 10,
        "socket.timeout.ms": 10000,
    })
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 10000,
    })

    def retried(what: str, call) -> None:
        """A transactional call, again while it fails with a retriable error; raises the
        KafkaException of an abortable error, Fatal on a fatal one."""
        for attempt in range(ATTEMPTS):
            try:
                call()
                return
            except KafkaException as e:
                err = e.args[0]
                if err.fatal():
                    say(f"fatal in {what}: {err.name()} {err.str()}")
                    raise Fatal() from e
                if err.retriable() and not err.txn_requires_abort() and attempt + 1 < ATTEMPTS:
                    say(f"retry {what}: {err.name()} {err.str()}")
                    continue
                raise

    retried("init_transactions", lambda: producer.init_transactions(API_TIMEOUT_S))
    say("ready")

    state = {"in_txn": 0, "parts": set(), "began": time.monotonic(), "aborts_in_a_row": 0}
    commits = 0
    total = 0

    def begin() -> None:
        producer.begin_transaction()
        state.update(in_txn=0, parts=set(), began=time.monotonic())

    def abort(why: str, rewind: bool) -> None:
        """Abort the open transaction; with `rewind`, seek the assigned partitions back to the
        group's committed offsets (the aborted records are consumed again)."""
        say(f"abort {why} ({state['in_txn']} records)")
        retried("abort_transaction", lambda: producer.abort_transaction(API_TIMEOUT_S))
        if rewind:
            assigned = consumer.assignment()
            if assigned:
                for tp in consumer.committed(assigned, timeout=API_TIMEOUT_S):
                    consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                 tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        begin()

    def on_assign(c, parts) -> None:
        say(f"assigned {sorted(p.partition for p in parts)}")

    def on_revoke(c, parts) -> None:
        # The partitions start again at the committed offsets when assigned: the records of
        # the open transaction must not be committed.
        say(f"revoked {sorted(p.partition for p in parts)}")
        if state["in_txn"]:
            abort("on revoke", rewind=False)

    def commit() -> bool:
        """send_offsets_to_transaction + commit_transaction; False if it had to abort."""
        consumed = [TopicPartition(args.input, p) for p in sorted(state["parts"])]
        positions = consumer.position(consumed)
        try:
            retried("send_offsets_to_transaction",
                    lambda: producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                                                 API_TIMEOUT_S))
            retried("commit_transaction", lambda: producer.commit_transaction(API_TIMEOUT_S))
        except KafkaException as e:
            err = e.args[0]
            abort(f"after {err.name()} {err.str()}", rewind=True)
            state["aborts_in_a_row"] += 1
            if state["aborts_in_a_row"] >= ABORTS_IN_A_ROW:
                say(f"giving up: {ABORTS_IN_A_ROW} transactions aborted in a row")
                raise Fatal() from e
            return False
        state["aborts_in_a_row"] = 0
        return True

    begin()
    consumer.subscribe([args.input], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stopping:
            for m in consumer.consume(200, 0.2):
                if m.error():
                    say(f"consumer error {m.error().name()} {m.error().str()}")
                    continue
                while True:
                    try:
                        producer.produce(args.output, key=m.key(), value=m.value() + args.tag.encode(),
                                         partition=m.partition())
                        break
                    except BufferError:
                        producer.poll(0.05)
                state["in_txn"] += 1
                state["parts"].add(m.partition())
            producer.poll(0)
            n = state["in_txn"]
            if commits == args.hang_after:
                if n >= 30:
                    producer.flush(API_TIMEOUT_S)
                    say(f"hang {n}")
                    while True:
                        time.sleep(1)
                continue
            if n and (n >= args.per_txn or time.monotonic() - state["began"] >= 0.5):
                if commit():
                    commits += 1
                    total += n
                    say(f"commit {commits} records {total}")
                    begin()
        if state["in_txn"] and commit():
            total += state["in_txn"]
            commits += 1
            say(f"commit {commits} records {total}")
            state["in_txn"] = 0
        consumer.close()
        say("stopped")
        return 0
    except Fatal:
        say("fatal")
        return 3


if __name__ == "__main__":
    sys.exit(main())
