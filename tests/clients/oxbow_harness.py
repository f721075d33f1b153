"""Shared helpers for the Oxbow client compatibility and fault tests.

Everything here talks to a real broker process over real sockets:

* `Broker` starts/stops/kills/restarts one `oxbow-broker` process on a fixed
  port and data directory, logging to a file whose tail is attached to every
  failing test report (see conftest.py).
* Client helpers wrap confluent-kafka (librdkafka) with bounded loops only.
* `read_batches` parses Kafka v2 record-batch headers out of a `.log` segment,
  so the fault tests can compute independently which records a damaged
  segment still holds.

Clients always bootstrap via 127.0.0.1 (librdkafka may resolve `localhost`
to ::1).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
import subprocess
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BROKER_BIN = REPO_ROOT / "target" / "release" / "oxbow-broker"
CLEAN_SHUTDOWN_MARKER = ".oxbow_cleanshutdown"

# Reference mode: the suite run against Apache Kafka through
# reference/kafka_as_oxbow.py, to check the tests themselves. Only documented
# Kafka differences are bridged: here the clean-shutdown marker's name, and
# Kafka 4's 1 MiB minimum for segment.bytes (its test-only topic config
# internal.segment.bytes has no such minimum); in test_librdkafka.py the error
# code of a CreatePartitions over Kafka's per-operation record limit.
REFERENCE_KAFKA = Path(os.environ.get("OXBOW_BROKER_BIN", "")).name == "kafka_as_oxbow.py"
if REFERENCE_KAFKA:
    CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"

STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 30.0


# --------------------------------------------------------------------------
# Broker process
# --------------------------------------------------------------------------


def broker_binary() -> Path:
    """Path of the broker binary: $OXBOW_BROKER_BIN or the release build.

    A relative $OXBOW_BROKER_BIN is resolved against the repository root.
    """
    raw = os.environ.get("OXBOW_BROKER_BIN")
    path = Path(raw) if raw else DEFAULT_BROKER_BIN
    if not path.is_absolute():
        path = REPO_ROOT / path
    return path


def require_broker_binary() -> Path:
    path = broker_binary()
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"oxbow broker binary not found or not executable: {path}\n"
            f"Build it (cargo build --release -p <server crate>) or point "
            f"OXBOW_BROKER_BIN at it.",
            pytrace=False,
        )
    return path


#: Ports already handed out, per host: each pick closes its socket before a broker binds, so the
#: kernel may offer the same port again (once it gave one node's HTTP and controller listeners
#: the same port, and the node could not start).
_given: dict[str, set[int]] = {}


def port_range() -> tuple[int, int] | None:
    """`OXBOW_TEST_PORTS=LO-HI`: pick ports in that range instead of the kernel's ephemeral one.
    tests/run-all gives the suites it runs beside pytest a range of their own (below both the
    ephemeral range and Kubernetes' NodePorts), so that a port one suite picked and has not bound
    yet cannot be handed to the other."""
    spec = os.environ.get("OXBOW_TEST_PORTS")
    if not spec:
        return None
    lo, _, hi = spec.partition("-")
    if not (lo.isdigit() and hi.isdigit() and 1024 <= int(lo) < int(hi) <= 65535):
        raise ValueError(f"OXBOW_TEST_PORTS={spec!r}: expected LO-HI, two ports, LO < HI")
    return int(lo), int(hi)


def free_port(host: str = "127.0.0.1") -> int:
    given = _given.setdefault(host, set())
    within = port_range()
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, random.randint(*within) if within else 0))
            except OSError:  # taken: try another one of the range
                continue
            port = s.getsockname()[1]
        if port not in given:
            given.add(port)
            return port


class Broker:
    """One oxbow-broker process bound to a fixed port and data directory."""

    def __init__(
        self,
        binary: Path,
        port: int,
        data_dir: Path,
        log_path: Path,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.binary = binary
        self.port = port
        self.data_dir = data_dir
        self.log_path = log_path
        self.overrides = dict(overrides or {})
        #: Extra environment variables for the broker process.
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.last_returncode: int | None = None

    #: The address the client listener binds (nodes of a multi-node cluster override it).
    listen_host = "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            str(self.binary),
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "--override", f"log.dirs={self.data_dir}",
            "--override", "num.partitions=4",
        ]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _log_marker(self, text: str) -> None:
        with open(self.log_path, "ab") as f:
            f.write(f"\n===== [test harness {time.strftime('%H:%M:%S')}] {text} =====\n".encode())

    def start(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        assert not self.running(), "broker already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        cmd = self.command()
        self._log_marker(f"start #{self.starts}: {' '.join(cmd)}")
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir.parent,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                self.last_returncode = rc
                pytest.fail(
                    f"broker exited with status {rc} during startup #{self.starts} "
                    f"(port {self.port}, dir {self.data_dir}).\n"
                    f"--- broker log tail ---\n{self.log_tail()}",
                    pytrace=False,
                )
            try:
                with socket.create_connection((self.listen_host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.kill()
        pytest.fail(
            f"broker did not accept TCP connections on 127.0.0.1:{self.port} "
            f"within {timeout:.0f}s (start #{self.starts}).\n"
            f"--- broker log tail ---\n{self.log_tail()}",
            pytrace=False,
        )

    def stop(self, timeout: float = SHUTDOWN_TIMEOUT_S) -> int:
        """SIGTERM and wait; fails the test if the broker does not exit."""
        assert self.proc is not None, "broker was never started"
        if self.proc.poll() is None:
            self._log_marker("SIGTERM")
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(
                    f"broker did not exit within {timeout:.0f}s of SIGTERM "
                    f"(killed it).\n--- broker log tail ---\n{self.log_tail()}",
                    pytrace=False,
                )
        self.last_returncode = self.proc.returncode
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: the crash case. No chance to flush or write markers."""
        assert self.proc is not None, "broker was never started"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self._log_marker("SIGKILL")
        self.last_returncode = self.proc.returncode

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Teardown: SIGTERM, then SIGKILL; never fails."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, lines: int = 60) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError as e:
            return f"(no broker log: {e})"
        text = data.decode("utf-8", "replace").splitlines()
        return "\n".join(text[-lines:])

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"


# --------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------


def wait_until(cond: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for: {what}", pytrace=False)
        time.sleep(interval)


def admin_client(broker: Broker, socket_timeout_s: float = 10.0) -> AdminClient:
    """An AdminClient of `broker`; a request unanswered for `socket_timeout_s` fails."""
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": int(socket_timeout_s * 1000)})


def create_topic(
    broker: Broker,
    topic: str,
    partitions: int,
    config: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    admin = admin_client(broker)
    config = dict(config or {})
    if REFERENCE_KAFKA and int(config.get("segment.bytes", 1 << 20)) < 1 << 20:
        config["internal.segment.bytes"] = config.pop("segment.bytes")
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config)],
        request_timeout=timeout,
        operation_timeout=timeout,
    )
    futures[topic].result(timeout=timeout + 5)
    wait_for_topic(admin, topic, partitions, timeout)


def wait_for_topic(admin: AdminClient, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Bounded wait until metadata shows the topic with all partitions led."""
    last = ["no metadata yet"]

    def ready() -> bool:
        md = admin.list_topics(timeout=10)
        t = md.topics.get(topic)
        if t is None:
            last[0] = "topic absent from metadata"
            return False
        if t.error is not None:
            last[0] = f"topic error {t.error}"
            return False
        led = [p for p in t.partitions.values() if p.leader >= 0 and p.error is None]
        last[0] = f"{len(t.partitions)} partitions, {len(led)} with a leader"
        return len(t.partitions) == partitions and len(led) == partitions

    wait_until(ready, timeout, f"topic {topic!r} with {partitions} led partitions ({last[0]})", 0.2)


def consume(c: Consumer, topic: str, n: int, timeout: float = 30) -> int:
    """Subscribes `c` to `topic` and reads up to `n` records (bounded in time); how many it read."""
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + timeout
    while got < n and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got += 1
    return got


def consumer_config(broker: Broker, **extra) -> dict:
    conf = {
        "bootstrap.servers": broker.bootstrap,
        # Required by confluent-kafka; these readers use assign() and never commit.
        "group.id": f"oxbow-test-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        # Surface out-of-range instead of silently jumping.
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 10000,
    }
    conf.update(extra)
    return conf


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple | None
    timestamp_type: int
    timestamp: int


def consume_all(
    broker: Broker,
    topic: str,
    partitions: Iterable[int],
    start_offsets: dict[int, int] | None = None,
    timeout: float = 120.0,
    **extra_conf,
) -> dict[int, list[Rec]]:
    """Read every partition from its start offset (default: beginning) to EOF.

    Bounded by `timeout`; fails on any partition-level consumer error.
    """
    parts = list(partitions)
    start_offsets = start_offsets or {}
    out: dict[int, list[Rec]] = {p: [] for p in parts}
    consumer = Consumer(consumer_config(broker, **extra_conf))
    try:
        consumer.assign([TopicPartition(topic, p, start_offsets.get(p, OFFSET_BEGINNING)) for p in parts])
        eof: set[int] = set()
        global_errors: list[str] = []
        deadline = time.monotonic() + timeout
        while eof != set(parts):
            if time.monotonic() >= deadline:
                counts = {p: len(v) for p, v in out.items()}
                pytest.fail(
                    f"consume_all({topic}): no EOF on partitions {sorted(set(parts) - eof)} "
                    f"within {timeout:.0f}s; records so far {counts}; "
                    f"client errors {global_errors[-5:]}",
                    pytrace=False,
                )
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add(msg.partition())
                        continue
                    if msg.topic() is None:
                        # Client-level (not partition) error: keep for diagnostics only.
                        global_errors.append(str(err))
                        continue
                    pytest.fail(
                        f"consume error on {msg.topic()}[{msg.partition()}] at offset "
                        f"{msg.offset()}: {err}",
                        pytrace=False,
                    )
                eof.discard(msg.partition())
                ts_type, ts = msg.timestamp()
                hdrs = msg.headers()
                out[msg.partition()].append(
                    Rec(
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        tuple(hdrs) if hdrs is not None else None,
                        ts_type,
                        ts,
                    )
                )
        return out
    finally:
        consumer.close()


def read_one(consumer: Consumer, topic: str, partition: int, offset: int, timeout: float = 15.0):
    """Assign at `offset` and return the first message delivered (or fail)."""
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                pytest.fail(f"{topic}[{partition}]: EOF at {msg.offset()} when reading offset {offset}",
                            pytrace=False)
            if msg.topic() is None:
                continue
            pytest.fail(f"{topic}[{partition}] read at {offset}: {err}", pytrace=False)
        return msg
    pytest.fail(f"{topic}[{partition}]: no message within {timeout:.0f}s when reading offset {offset}",
                pytrace=False)


TRANSIENT = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TRANSPORT,
    KafkaError.REQUEST_TIMED_OUT,
}


def watermarks(broker: Broker, topic: str, partition: int, timeout: float = 15.0) -> tuple[int, int]:
    """(low, high) via ListOffsets; retries retriable errors (e.g. NOT_LEADER
    right after a topic is created) for at most `timeout` seconds."""
    consumer = Consumer(consumer_config(broker))
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if not (isinstance(err, KafkaError) and (err.retriable() or err.code() in TRANSIENT)) \
                        or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


class DeliveryLog:
    """Delivery-report sink: successful (partition, offset) and failures, by id."""

    def __init__(self, id_of: Callable) -> None:
        self.id_of = id_of
        self.ok: dict = {}
        self.failed: dict = {}

    def __call__(self, err, msg) -> None:
        ident = self.id_of(msg)
        if err is None:
            self.ok[ident] = (msg.partition(), msg.offset())
        else:
            self.failed[ident] = str(err)

    @property
    def done(self) -> int:
        return len(self.ok) + len(self.failed)


def produce_one(producer: Producer, timeout: float = 30.0, **kwargs) -> None:
    """produce() with bounded back-off on a full local queue."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            producer.produce(**kwargs)
            return
        except BufferError:
            if time.monotonic() >= deadline:
                pytest.fail(f"producer queue stayed full for {timeout:.0f}s", pytrace=False)
            producer.poll(0.05)


def flush_all(producer: Producer, timeout: float = 60.0) -> None:
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} messages still undelivered after flush({timeout})"


# --------------------------------------------------------------------------
# On-disk segments
# --------------------------------------------------------------------------

BATCH_HEADER = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
LAST_OFFSET_DELTA_AT = 23  # offset of lastOffsetDelta (int32) inside a v2 batch


@dataclass(frozen=True)
class Batch:
    position: int
    base_offset: int
    last_offset: int
    size: int  # whole batch incl. the 12-byte offset+length prefix


def segment_files(partition_dir: Path, suffix: str = ".log") -> list[Path]:
    """Segment files sorted by the base offset in their 20-digit name."""
    files = [p for p in partition_dir.iterdir() if p.suffix == suffix and p.stem.isdigit()]
    return sorted(files, key=lambda p: int(p.stem))


def base_offset_of(path: Path) -> int:
    assert len(path.stem) == 20 and path.stem.isdigit(), f"segment name not 20 digits: {path.name}"
    return int(path.stem)


def read_batches(path: Path) -> tuple[list[Batch], int]:
    """Complete v2 record batches in a segment, plus the count of trailing bytes
    that do not form a complete batch."""
    return batches_in(path.read_bytes())


def batches_in(data: bytes) -> tuple[list[Batch], int]:
    """Complete v2 record batches in a segment's bytes, plus the count of trailing bytes that do
    not form a complete batch."""
    batches: list[Batch] = []
    pos = 0
    while len(data) - pos >= 17:
        base, length, _epoch, magic = BATCH_HEADER.unpack_from(data, pos)
        size = 12 + length
        if magic != 2 or length < 49 or pos + size > len(data):
            break
        (delta,) = struct.unpack_from(">i", data, pos + LAST_OFFSET_DELTA_AT)
        batches.append(Batch(pos, base, base + delta, size))
        pos += size
    return batches, len(data) - pos


@dataclass(frozen=True)
class ProducerBatch:
    """A v2 batch's producer fields and, if uncompressed, its record values."""
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    control: bool
    values: tuple[bytes, ...] | None


def _zigzag(data: bytes, i: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        b = data[i]
        i += 1
        raw |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), i


def producer_batches(partition_dir: Path) -> list[ProducerBatch]:
    """Every complete batch of a partition's segments, in offset order (Kafka's and Oxbow's
    segment format is the same)."""
    out: list[ProducerBatch] = []
    for seg in segment_files(partition_dir):
        data = seg.read_bytes()
        for b in batches_in(data)[0]:
            at = b.position + 21
            attrs, _, _, _, pid, pepoch, seq, n = struct.unpack_from(">hiqqqhii", data, at)
            values = None
            if attrs & 0x07 == 0:
                vals, i, end = [], at + 40, b.position + b.size
                for _ in range(n):
                    length, i = _zigzag(data, i)
                    nxt = i + length
                    _, i = _zigzag(data, i + 1)  # attributes byte, timestamp delta
                    _, i = _zigzag(data, i)  # offset delta
                    klen, i = _zigzag(data, i)
                    vlen, i = _zigzag(data, i + max(klen, 0))
                    vals.append(data[i:i + max(vlen, 0)])
                    i = nxt
                assert i == end, f"{seg}: batch at {b.base_offset} does not parse"
                values = tuple(vals)
            out.append(ProducerBatch(b.base_offset, b.last_offset, pid, pepoch, seq, n, bool(attrs & 0x20), values))
    return out


def find_files_named(root: Path, name: str) -> list[Path]:
    return [p for p in root.rglob(name)]


def scrape(url: str) -> tuple[dict[str, str], dict[str, str], dict[str, float]]:
    """GET a Prometheus text page: (TYPE by family, HELP by family, value by series)."""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8", r.headers["Content-Type"]
        text = r.read().decode()
    types, helps, series = {}, {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line.startswith("# HELP "):
            _, _, name, what = line.split(" ", 3)
            helps[name] = what
        elif line:
            key, value = line.rsplit(" ", 1)
            assert key not in series, f"series {key} twice"
            series[key] = float(value)
    return types, helps, series
