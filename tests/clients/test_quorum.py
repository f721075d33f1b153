"""Multi-node clusters on the metadata quorum (openraft + RocksDB), driven by real clients.

Every cluster runs on loopback addresses 127.0.1.N (tests/clients/oxbow_cluster.py): voters are
combined broker+controller nodes, later nodes broker-only. Clients are librdkafka
(confluent-kafka) admin clients, producers and consumers.

Timings are printed (run with -s to see them), never asserted.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from oxbow_cluster import Cluster, Node, free_port_on, node_host
from oxbow_harness import consume_all, flush_all, require_broker_binary, scrape, wait_until


@pytest.fixture
def cluster_factory(request, tmp_path):
    clusters: list[Cluster] = []

    def make(controllers: int = 3, brokers: int = 0, overrides: dict[str, str] | None = None, observers: int = 0,
             dedicated_controllers: bool = False) -> Cluster:
        c = Cluster(require_broker_binary(), tmp_path, controllers, brokers, overrides, observers=observers,
                    dedicated_controllers=dedicated_controllers)
        clusters.append(c)
        request.node._oxbow_brokers = [n for c in clusters for n in c.nodes]
        c.start()
        return c

    yield make
    for c in clusters:
        c.close()


def admin(node_or_bootstrap) -> AdminClient:
    bootstrap = node_or_bootstrap if isinstance(node_or_bootstrap, str) else node_or_bootstrap.bootstrap
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create(adm: AdminClient, name: str, partitions: int = 3, **kw) -> None:
    fut = adm.create_topics([NewTopic(name, num_partitions=partitions, **kw)], operation_timeout=30, request_timeout=40)
    fut[name].result(timeout=60)


def controller_of(node) -> int:
    """The active controller, asked through `node` (its GET /quorum, answered by the leader)."""
    return node.leader()


def topic_view(adm: AdminClient) -> dict[str, tuple]:
    """name -> (partition count, leaders in partition order) as one node's metadata shows it."""
    md = adm.list_topics(timeout=10)
    return {
        name: (len(t.partitions), tuple(t.partitions[p].leader for p in sorted(t.partitions)))
        for name, t in md.topics.items()
    }


def topic_ids(adm: AdminClient, names: list[str], timeout: float = 30) -> dict[str, str]:
    """Each topic's id as DescribeTopics answers. UNKNOWN_TOPIC_OR_PART is asked again until
    `timeout`: the broker the client asks may not have applied the topic yet (a node's image,
    GET /metadata, can be ahead of its Metadata answers by one publish; Kafka's brokers, too,
    apply metadata one after another). Seen once after a partition healed (2026-12-05)."""
    deadline = time.monotonic() + timeout
    while True:
        futs = adm.describe_topics(TopicCollection(names), request_timeout=15)
        try:
            return {name: str(f.result(timeout=20).topic_id) for name, f in futs.items()}
        except KafkaException as e:
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def test_topics_created_through_any_node_are_seen_by_every_node(cluster_factory):
    c = cluster_factory(controllers=3, brokers=1)
    for n in c.nodes:
        create(admin(n), f"from-node-{n.node_id}", partitions=4)
    names = sorted(f"from-node-{n.node_id}" for n in c.nodes)

    views, ids, controllers, broker_lists = {}, {}, set(), {}
    for n in c.nodes:
        adm = admin(n)
        wait_until(lambda: n.sees(*names), 15, f"node {n.node_id} sees all topics")
        views[n.node_id] = {k: v for k, v in n.view().items() if k in names}
        assert all(name in topic_view(adm) for name in names), "librdkafka's metadata lacks a topic"
        ids[n.node_id] = topic_ids(adm, names)
        controllers.add(controller_of(n))
        broker_lists[n.node_id] = sorted(b.id for b in adm.list_topics(timeout=10).brokers.values())

    first = views[c.nodes[0].node_id]
    for node, view in views.items():
        assert view == first, f"node {node} disagrees on topics/leaders: {view} vs {first}"
        assert ids[node] == ids[c.nodes[0].node_id], f"node {node} disagrees on topic ids"
        assert broker_lists[node] == [1, 2, 3, 4], f"node {node} lists brokers {broker_lists[node]}"
    assert len(controllers) == 1 and controllers <= {1, 2, 3}, f"controllers seen: {controllers}"
    leaders = {leader for count, ls in first.values() for leader in ls}
    assert leaders == {1, 2, 3, 4}, f"partitions are led by {leaders}: placement should use every broker"
    assert all(count == 4 for count, _ in first.values())

    # Records go to each partition's leader, wherever it is, and come back.
    p = Producer({"bootstrap.servers": c.nodes[0].bootstrap, "linger.ms": 5})
    for i in range(400):
        p.produce("from-node-1", key=f"k{i}".encode(), value=f"v{i}".encode())
    flush_all(p)
    got = consume_all(c.nodes[-1], "from-node-1", partitions=range(4))
    values = [r.value.decode() for recs in got.values() for r in recs]
    assert sorted(values) == sorted(f"v{i}" for i in range(400))
    assert sum(1 for recs in got.values() if recs) > 1, "keys spread over several partitions"


class Wire:
    """Kafka requests to one node, over a connection of its own (non-flexible versions). Kafka's
    clients send topic changes to the controller a Metadata answer names; these go where the
    test says."""

    def __init__(self, node) -> None:
        self.sock = socket.create_connection((node.host, node.port), timeout=60)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, api_key: int, version: int, body: bytes) -> io.BytesIO:
        correlation = self.send(api_key, version, body)
        frame = self.answer(correlation)
        assert frame is not None, "the broker closed the connection"
        return frame

    def send(self, api_key: int, version: int, body: bytes) -> int:
        """Sends a request without reading its answer; returns its correlation id."""
        correlation, frame = self.frame(api_key, version, body)
        self.sock.sendall(frame)
        return correlation

    def frame(self, api_key: int, version: int, body: bytes) -> tuple[int, bytes]:
        """A request's frame, with the next correlation id."""
        self.correlation += 1
        head = struct.pack(">hhih", api_key, version, self.correlation, 4) + b"test"
        return self.correlation, struct.pack(">i", len(head) + len(body)) + head + body

    def answer(self, correlation: int) -> io.BytesIO | None:
        """The next answer (after its correlation id), which must be `correlation`'s; None if the
        broker closed the connection instead."""
        head = self._exactly(4)
        if head is None:
            return None
        body = self._exactly(struct.unpack(">i", head)[0])
        assert body is not None, "the broker closed the connection inside an answer"
        frame = io.BytesIO(body)
        assert struct.unpack(">i", frame.read(4))[0] == correlation
        return frame

    def _exactly(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def send_produce(self, topic: str, partition: int, *values: bytes) -> list[int]:
        """Produce v3 requests (acks=1), one per value, each of one record to one partition, in
        one write (pipelined); answers not read. Their correlation ids."""
        frames = []
        for value in values:
            records = record_batch(value)
            body = (self.string(None) + struct.pack(">hii", 1, 30_000, 1) + self.string(topic)
                    + struct.pack(">iii", 1, partition, len(records)) + records)
            frames.append(self.frame(0, 3, body))
        self.sock.sendall(b"".join(f for _, f in frames))
        return [c for c, _ in frames]

    def produce_answer(self, correlation: int) -> tuple[int, int] | None:
        """(error code, base offset) of a one-partition Produce v3; None if the connection closed."""
        f = self.answer(correlation)
        if f is None:
            return None
        f.read(4)  # one topic
        self.read_string(f)
        f.read(4 + 4)  # one partition, its index
        code, base = struct.unpack(">hq", f.read(10))
        return code, base

    @staticmethod
    def string(v: str | None) -> bytes:
        if v is None:
            return struct.pack(">h", -1)
        b = v.encode()
        return struct.pack(">h", len(b)) + b

    @staticmethod
    def read_string(f: io.BytesIO) -> str | None:
        (n,) = struct.unpack(">h", f.read(2))
        return None if n < 0 else f.read(n).decode()

    def create_partitions(self, topic: str, count: int, assignments: list[list[int]]) -> tuple[int, str | None]:
        """CreatePartitions v1 for one topic: (error code, message)."""
        lists = b"".join(struct.pack(">i", len(a)) + b"".join(struct.pack(">i", x) for x in a) for a in assignments)
        body = (struct.pack(">i", 1) + self.string(topic) + struct.pack(">ii", count, len(assignments)) + lists
                + struct.pack(">ib", 30_000, 0))
        f = self.call(37, 1, body)
        f.read(4 + 4)  # throttle, one result
        self.read_string(f)
        (code,) = struct.unpack(">h", f.read(2))
        return code, self.read_string(f)

    def set_topic_config(self, topic: str, key: str, value: str) -> tuple[int, str | None]:
        """IncrementalAlterConfigs v0, one SET on one topic: (error code, message)."""
        body = (struct.pack(">ib", 1, 2) + self.string(topic) + struct.pack(">i", 1) + self.string(key)
                + struct.pack(">b", 0) + self.string(value) + struct.pack(">b", 0))
        f = self.call(44, 0, body)
        f.read(4 + 4)
        (code,) = struct.unpack(">h", f.read(2))
        return code, self.read_string(f)

    def delete_topic(self, topic: str) -> int:
        """DeleteTopics v1 of one topic: its error code."""
        f = self.call(20, 1, struct.pack(">i", 1) + self.string(topic) + struct.pack(">i", 30_000))
        f.read(4 + 4)
        self.read_string(f)
        return struct.unpack(">h", f.read(2))[0]


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def varint(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), b""
    while True:
        if z < 0x80:
            return out + bytes([z])
        out += bytes([(z & 0x7F) | 0x80])
        z >>= 7


def record_batch(value: bytes) -> bytes:
    """A record batch (v2) of one record: no key, no headers, no producer id."""
    record = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    record = varint(len(record)) + record
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, 0, now, now, -1, -1, -1, 1) + record
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc32c(after_crc)) + after_crc


def test_a_self_fenced_broker_refuses_a_produce_and_serves_nothing_pipelined_behind_it(cluster_factory):
    """A broker whose heartbeats go unanswered for its session timeout fences itself: it refuses
    produce with NOT_LEADER_OR_FOLLOWER. It then closes that connection after the answer and
    serves none of the requests the client pipelined behind it: were they served once a heartbeat
    unfenced it again, an idempotent producer's later batch would be written ahead of the refused
    one, whose retry then fails OUT_OF_ORDER_SEQUENCE_NUMBER until it expires."""
    c = cluster_factory(controllers=3, brokers=1)
    broker = c.node(4)
    adm = admin(c.nodes[0])
    adm.create_topics([NewTopic("self-fence", num_partitions=1, replica_assignment=[[4]])],
                      operation_timeout=30)["self-fence"].result(40)
    wait_until(lambda: broker.view().get("self-fence", (0, ()))[1] == (4,), 15, "led by broker 4, as it knows")

    def produce_once(value: bytes, refusal_closes: bool = False) -> tuple[int, int]:
        """One produce on a connection of its own. `refusal_closes`: the broker closed it after
        a refusal."""
        w = Wire(broker)
        try:
            got = w.produce_answer(*w.send_produce("self-fence", 0, value))
            assert got is not None, "no answer"
            if got[0] != 0 and refusal_closes:
                w.sock.settimeout(10)
                try:
                    closed = w.sock.recv(1) == b""
                except ConnectionResetError:
                    closed = True
                except TimeoutError:
                    closed = False
                assert closed, "the connection stays open after a refused produce"
            return got
        finally:
            w.close()

    def first_write(value: bytes, timeout: float) -> tuple[int, int]:
        """Produces `value` until broker 4 takes it (it applies the topic, or is unfenced, in a
        moment): (0, its offset)."""
        deadline = time.monotonic() + timeout
        while (got := produce_once(value))[0] != 0:
            assert time.monotonic() < deadline, f"broker 4 does not take writes: {got}"
            time.sleep(0.2)
        return got

    assert first_write(b"before", 15) == (0, 0)

    # Two of the three voters stop: no quorum answers broker 4's heartbeats.
    stopped = [c.node(2), c.node(3)]
    for n in stopped:
        n.proc.send_signal(signal.SIGSTOP)
    try:
        written = 1
        deadline = time.monotonic() + 30
        while (got := produce_once(b"probe", refusal_closes=True))[0] == 0:
            assert got[1] == written
            written += 1
            assert time.monotonic() < deadline, "broker 4 went on taking writes without a quorum"
            time.sleep(0.2)
        assert got[0] == 6, got  # NOT_LEADER_OR_FOLLOWER
        # Three produce requests pipelined on one connection: the first is answered, refused,
        # and the connection closes without an answer to the others.
        w = Wire(broker)
        sent = w.send_produce("self-fence", 0, *(f"pipelined-{i}".encode() for i in range(3)))
        first = w.produce_answer(sent[0])
        assert first is not None and first[0] == 6, first
        assert w.produce_answer(sent[1]) is None, "a request pipelined behind the refused one was answered"
        w.close()
    finally:
        for n in stopped:
            n.proc.send_signal(signal.SIGCONT)
    # Unfenced again, the broker takes writes; none of the pipelined ones was written.
    assert first_write(b"after", 60) == (0, written)
    values = [r.value for r in consume_all(c.nodes[0], "self-fence", partitions=[0])[0]]
    assert values == [b"before"] + [b"probe"] * (written - 1) + [b"after"], values


def test_a_topic_created_through_one_node_is_changed_and_deleted_through_the_others_at_once(cluster_factory):
    """Kafka answers IncrementalAlterConfigs, CreatePartitions and DeleteTopics on the active
    controller, so a topic created through one node can be changed through any other the moment
    its creation is answered, whether or not that node has applied it yet (opening 2,000
    partitions takes the others a moment). A benchmark run once failed a CreatePartitions this
    way. Two config changes through two nodes one after the other both hold: the second is not
    merged into an image that lacks the first."""
    c = cluster_factory(controllers=3, brokers=1)
    nodes = c.nodes
    wires = [Wire(n) for n in nodes]
    try:
        for i in range(4):
            name = f"fresh-{i}"
            # librdkafka sends it to the node Metadata names as the controller.
            create(admin(nodes[i]), name, partitions=2000, replication_factor=1)
            # Over the four topics, each step goes through each node once.
            alterer, other, grower, deleter = (i + 1) % 4, (i + 2) % 4, (i + 3) % 4, i
            for n, key, value in ((alterer, "retention.ms", str(3_600_000 + i)), (other, "segment.bytes", "1048576")):
                code, msg = wires[n].set_topic_config(name, key, value)
                assert code == 0, f"{name}: {key} through node {nodes[n].node_id}: error {code} {msg}"
            # An explicit replica list, checked against the topic as the active controller has it.
            code, msg = wires[grower].create_partitions(name, 2001, [[1 + i]])
            assert code == 0, f"{name}: CreatePartitions through node {nodes[grower].node_id}: error {code} {msg}"
            # Answered once the node it went through has applied it.
            image = nodes[grower].metadata()["topics"][name]
            assert len(image["partitions"]) == 2001 and image["partitions"][2000]["replicas"] == [1 + i], image["partitions"][-1]
            # Both config changes hold (librdkafka asks any node; it may not have applied them yet).
            adm = admin(nodes[other])

            def configs() -> tuple:
                got = adm.describe_configs([ConfigResource("topic", name)])
                values = {k: v.value for f in got.values() for k, v in f.result(timeout=30).items()}
                return values["retention.ms"], values["segment.bytes"]

            wait_until(lambda: configs() == (str(3_600_000 + i), "1048576"), 30,
                       f"{name} has both config changes (retention.ms, segment.bytes)")
            code = wires[deleter].delete_topic(name)
            assert code == 0, f"{name}: DeleteTopics through node {nodes[deleter].node_id}: error {code}"
    finally:
        for w in wires:
            w.close()
    names = [f"fresh-{i}" for i in range(4)]
    for n in c.nodes:
        wait_until(lambda: not any(name in n.view() for name in names), 60, f"node {n.node_id} has none of them left")


def test_broker_only_node_started_before_its_only_controller_follows_it(request, tmp_path):
    """A broker-only node whose first metadata fetch fails (its single controller is not up yet)
    keeps asking that controller, registers once it is up, and serves."""
    c = Cluster(require_broker_binary(), tmp_path, controllers=1, brokers=1)
    request.node._oxbow_brokers = c.nodes
    try:
        c.start(order=[2, 1], stagger=3.0)
        create(admin(c.node(2)), "late-controller", partitions=2)
        wait_until(lambda: c.node(2).sees("late-controller"), 15, "node 2 follows the metadata")
        brokers = sorted(b.id for b in admin(c.node(2)).list_topics(timeout=10).brokers.values())
        assert brokers == [1, 2], f"node 2 lists brokers {brokers}"
    finally:
        c.close()


def _readyz(node) -> int:
    try:
        with urllib.request.urlopen(f"http://{node.host}:{node.http_port}/readyz", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _metrics(node) -> dict[str, float]:
    """A node's GET /metrics: value by series."""
    return scrape(f"http://{node.host}:{node.http_port}/metrics")[2]


def test_dedicated_controllers_serve_broker_only_nodes_and_survive_losing_the_active_one(cluster_factory):
    """3 controller-only nodes (process.roles=controller, no client listener) + 3 broker-only."""
    c = cluster_factory(controllers=3, brokers=3, dedicated_controllers=True)
    brokers = c.brokers
    assert [n.node_id for n in brokers] == [4, 5, 6]
    for n in brokers:
        create(admin(n), f"dedicated-{n.node_id}", partitions=6)
    names = sorted(f"dedicated-{n.node_id}" for n in brokers)

    views, ids = {}, {}
    for n in c.nodes:  # every node's own image, controllers included
        wait_until(lambda: n.sees(*names), 15, f"node {n.node_id} sees all topics")
        views[n.node_id] = {k: v for k, v in n.view().items() if k in names}
    first = views[1]
    assert all(v == first for v in views.values()), f"nodes disagree: {views}"
    leaders = {leader for _, ls in first.values() for leader in ls}
    assert leaders == {4, 5, 6}, f"partitions must be led by brokers only, got {leaders}"
    controller = controller_of(brokers[0])
    assert controller in (1, 2, 3), controller
    for n in brokers:
        adm = admin(n)
        ids[n.node_id] = topic_ids(adm, names)
        assert sorted(b.id for b in adm.list_topics(timeout=10).brokers.values()) == [4, 5, 6]
        # Clients cannot reach a controller-only node: as Kafka's brokers do, DescribeCluster
        # names a live broker, which forwards controller requests.
        dc = adm.describe_cluster(request_timeout=10).result(timeout=20)
        assert dc.controller.id in (4, 5, 6) and sorted(x.id for x in dc.nodes) == [4, 5, 6]
    assert ids[4] == ids[5] == ids[6]
    assert all(_readyz(n) == 200 for n in c.controllers)

    p = Producer({"bootstrap.servers": c.bootstrap(), "linger.ms": 5})
    for i in range(300):
        p.produce("dedicated-4", key=f"k{i}".encode(), value=f"v{i}".encode())
    flush_all(p)
    got = consume_all(brokers[-1], "dedicated-4", partitions=range(6))
    assert sorted(r.value.decode() for recs in got.values() for r in recs) == sorted(f"v{i}" for i in range(300))

    # The active controller (a node with no broker) dies: the brokers carry on with a new one.
    t0 = time.monotonic()
    c.node(controller).kill()
    wait_until(lambda: controller_of(brokers[0]) not in (-1, controller), 30, "a new active controller")
    print(f"\ncontroller-only node {controller} SIGKILLed; new active controller {controller_of(brokers[0])} after {time.monotonic() - t0:.2f}s")
    create(admin(brokers[1]), "after-failover", partitions=3)
    p = Producer({"bootstrap.servers": c.bootstrap(), "linger.ms": 5})
    for i in range(90):
        p.produce("after-failover", value=f"a{i}".encode())
    flush_all(p)
    got = consume_all(brokers[2], "after-failover", partitions=range(3))
    assert sum(len(recs) for recs in got.values()) == 90
    assert all(leader in (4, 5, 6) for leader in brokers[0].view()["after-failover"][1])

    # Controller-only nodes serve the quorum's metrics (no broker ones); the new active
    # controller is the one that says so, and it counts no partition offline.
    new_active = controller_of(brokers[0])
    left = [n for n in c.controllers if n.node_id != controller]

    def controller_metrics():
        m = {n.node_id: _metrics(n) for n in left}
        return m if all("oxbow_controller_active" in x for x in m.values()) and \
            m[new_active]["oxbow_controller_active"] == 1 else None
    wait_until(controller_metrics, 15, "the surviving controllers' /metrics")
    m = controller_metrics()
    quorum_families = {"oxbow_controller_active", "oxbow_controller_partitions_offline", "oxbow_quorum_term",
                       "oxbow_quorum_commits_total", "oxbow_quorum_commit_time_milliseconds_total"}
    other = next(n.node_id for n in left if n.node_id != new_active)
    for node_id, x in m.items():
        lag = {f'oxbow_quorum_follower_lag{{node="{v}"}}' for v in (controller, other)} if node_id == new_active else set()
        assert set(x) == quorum_families | lag, x
        assert x["oxbow_controller_active"] == (1 if node_id == new_active else 0), (node_id, x)
        assert x["oxbow_controller_partitions_offline"] == 0 and x["oxbow_quorum_term"] >= 2, (node_id, x)
    # The new active controller committed (at least) after-failover's creation; the SIGKILLed
    # voter missed it and lags, the other one catches up.
    assert m[new_active]["oxbow_quorum_commits_total"] >= 1
    assert m[new_active][f'oxbow_quorum_follower_lag{{node="{controller}"}}'] >= 1
    wait_until(lambda: _metrics(c.node(new_active)).get(f'oxbow_quorum_follower_lag{{node="{other}"}}') == 0, 15,
               "the surviving voter to catch up with the new active controller")
    # Broker-only nodes serve their broker metrics, and are never the active controller.
    b = _metrics(brokers[0])
    assert b["oxbow_controller_active"] == 0 and b["oxbow_controller_partitions_offline"] == 0, b
    assert b['oxbow_broker_requests_total{api="Produce"}'] >= 1

    c.node(controller).start()
    wait_until(lambda: c.node(controller).sees("after-failover"), 30, "the restarted controller catches up")
    wait_until(lambda: _readyz(c.node(controller)) == 200, 30, "the restarted controller is ready")
    voters = sorted(v["node_id"] for v in brokers[0].quorum()["voters"])
    assert voters == [1, 2, 3], voters


def test_active_controller_killed_while_topics_are_created(cluster_factory):
    c = cluster_factory(controllers=3)
    leader = controller_of(c.nodes[0])
    entry = next(n for n in c.nodes if n.node_id != leader)
    adm = admin(entry)

    created: dict[str, str] = {}
    errors: list[str] = []
    stop = threading.Event()
    count = {"n": 0}

    def create_loop():
        i = 0
        while not stop.is_set() and i < 400:
            name = f"failover-{i}"
            try:
                create(adm, name, partitions=2)
                created[name] = "ok"
            except KafkaException as e:
                err = e.args[0]
                if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    created[name] = "exists"  # a retried request that had committed
                else:
                    errors.append(f"{name}: {err}")
                    continue  # try the same name again
            i += 1
            count["n"] = i

    t = threading.Thread(target=create_loop)
    t.start()
    wait_until(lambda: count["n"] >= 10, 60, "10 topics created before the kill")
    killed = c.node(leader)
    killed.kill()
    t0 = time.monotonic()
    survivors = [n for n in c.nodes if n is not killed]

    def new_leader() -> bool:
        return controller_of(survivors[0]) not in (leader, -1)

    wait_until(new_leader, 30, "a new active controller")
    elected_after = time.monotonic() - t0
    before = count["n"]
    wait_until(lambda: count["n"] >= before + 10, 60, "10 more topics after the failover")
    stop.set()
    t.join(120)
    print(f"\nnew active controller {controller_of(survivors[0])} elected {elected_after:.2f}s after SIGKILL of {leader}; "
          f"{len(created)} topics created, {len(errors)} transient errors: {errors[:3]}")

    # No acknowledged topic lost, none duplicated, every survivor agrees.
    names = sorted(created)
    for n in survivors:
        view = n.view()
        missing = [x for x in names if x not in view]
        assert not missing, f"node {n.node_id} lost acknowledged topics: {missing[:5]}"
        assert all(view[x][0] == 2 for x in names)
    ids = [topic_ids(admin(n), names) for n in survivors]
    assert ids[0] == ids[1], "survivors disagree on topic ids"
    assert len(set(ids[0].values())) == len(names), "two topics share an id"

    # The killed node restarts, rejoins and catches up.
    killed.start()
    wait_until(lambda: killed.sees(*names), 60, "the restarted node catches up")
    assert topic_ids(admin(killed), names) == ids[0]
    assert controller_of(killed) == controller_of(survivors[0])
    assert killed.quorum()["image_version"] > 0


def test_fenced_broker_loses_leadership_and_gets_it_back(cluster_factory):
    c = cluster_factory(controllers=3, brokers=1)
    broker = c.node(4)
    adm = admin(c.nodes[0])
    fut = adm.create_topics([NewTopic("fence", num_partitions=4, replica_assignment=[[4], [1], [2], [3]])], operation_timeout=30)
    fut["fence"].result(timeout=40)
    wait_until(lambda: topic_view(adm).get("fence", (0, ()))[1] == (4, 1, 2, 3), 15, "partitions led as assigned")

    broker.proc.send_signal(signal.SIGSTOP)  # stops heartbeating (and everything else)
    t0 = time.monotonic()
    try:
        wait_until(lambda: topic_view(adm)["fence"][1][0] == -1, 30, "partition 0 leaderless after fencing")
        fenced_after = time.monotonic() - t0
        md = adm.list_topics(timeout=10)
        assert 4 not in md.brokers, "a fenced broker is not offered to clients"
        assert topic_view(adm)["fence"][1][1:] == (1, 2, 3), "other partitions keep their leaders"
        # ElectLeaders (librdkafka's elect_leaders): partition 0's only replica is fenced, so
        # neither a preferred nor an unclean election finds a leader; the others need none.
        fenced_codes = {
            kind: elections(adm, kind, [("fence", 0), ("fence", 1)]) for kind in (ElectionType.PREFERRED, ElectionType.UNCLEAN)
        }
        assert fenced_codes[ElectionType.PREFERRED] == {0: "PREFERRED_LEADER_NOT_AVAILABLE", 1: "ELECTION_NOT_NEEDED"}, fenced_codes
        assert fenced_codes[ElectionType.UNCLEAN] == {0: "ELIGIBLE_LEADERS_NOT_AVAILABLE", 1: "ELECTION_NOT_NEEDED"}, fenced_codes
        assert elections(adm, ElectionType.PREFERRED, [("fence", 9), ("no-such-topic", 0)]) == {
            9: "UNKNOWN_TOPIC_OR_PART", 0: "UNKNOWN_TOPIC_OR_PART"}
        # Every partition: only partition 0 is reported (the others needed no election).
        assert elections(adm, ElectionType.PREFERRED, None) == {0: "PREFERRED_LEADER_NOT_AVAILABLE"}
        # Explicit replica lists naming only the fenced broker are refused, as Kafka refuses
        # them (no active replica to lead); one with an active broker besides it is taken.
        fenced_only = "All brokers specified in the manual partition assignment for partition {} are fenced or in controlled shutdown."
        err = adm.create_topics([NewTopic("on-fenced", num_partitions=2, replica_assignment=[[1], [4]])],
                                operation_timeout=30)["on-fenced"].exception(40)
        assert err is not None and err.args[0].name() == "INVALID_REPLICA_ASSIGNMENT", err
        assert err.args[0].str() == fenced_only.format(1), err
        err = adm.create_partitions([NewPartitions("fence", 5, replica_assignment=[[4]])],
                                    operation_timeout=30)["fence"].exception(40)
        assert err is not None and err.args[0].name() == "INVALID_REPLICA_ASSIGNMENT", err
        assert err.args[0].str() == fenced_only.format(4), err
        adm.create_topics([NewTopic("beside-fenced", num_partitions=1, replica_assignment=[[4, 2]])],
                          operation_timeout=30)["beside-fenced"].result(40)
        wait_until(lambda: topic_view(adm).get("beside-fenced", (0, ()))[1] == (2,), 15, "led by the active replica")
        adm.delete_topics(["beside-fenced"], operation_timeout=30)["beside-fenced"].result(40)
        wait_until(lambda: "beside-fenced" not in topic_view(adm), 15, "beside-fenced deleted")
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    t1 = time.monotonic()
    wait_until(lambda: topic_view(adm)["fence"][1][0] == 4, 30, "partition 0 led by broker 4 again")
    print(f"\nbroker 4 fenced {fenced_after:.2f}s after it stopped (session timeout 3 s); unfenced {time.monotonic() - t1:.2f}s after it resumed")
    assert 4 in adm.list_topics(timeout=10).brokers
    assert elections(adm, ElectionType.PREFERRED, None) == {}, "every partition is led by its preferred replica again"

    p = Producer({"bootstrap.servers": c.bootstrap()})
    for i in range(50):
        p.produce("fence", value=f"r{i}".encode(), partition=0)
    flush_all(p)
    got = consume_all(c.nodes[0], "fence", partitions=[0])
    assert [r.value.decode() for r in got[0]] == [f"r{i}" for i in range(50)]


def elections(adm: AdminClient, kind, partitions) -> dict:
    """partition -> error name ("NONE" when elected) of one ElectLeaders request."""
    tps = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    # No timeout keywords: confluent-kafka 2.16's elect_leaders fails to parse them (SystemError).
    result = adm.elect_leaders(kind, tps).result(timeout=40)
    return {tp.partition: (e.name() if e is not None else "NONE") for tp, e in result.items()}


def test_lagging_voter_catches_up_and_every_node_restarts_from_its_snapshot(cluster_factory):
    c = cluster_factory(controllers=3, overrides={"metadata.log.max.record.bytes.between.snapshots": "8192"})
    lagging = c.node(3)
    lagging.stop()
    adm = admin(c.nodes[0])
    names = [f"snap-{i}" for i in range(150)]
    for name in names:
        create(adm, name, partitions=1)
    ids = topic_ids(adm, names)

    lagging.start()
    wait_until(lambda: lagging.sees(*names), 60, "the lagging voter catches up")
    assert topic_ids(admin(lagging), names) == ids

    # Every node restarts from its own snapshot plus the log after it.
    for n in c.nodes:
        assert "metadata snapshot written" in n.log_path.read_text(errors="replace"), f"node {n.node_id} wrote no snapshot"
        n.stop()
    c.start()
    for n in c.nodes:
        adm = admin(n)
        wait_until(lambda: n.sees(*names), 60, f"node {n.node_id} has every topic after restart")
        assert topic_ids(adm, names) == ids
        assert "loaded from the stored snapshot" in n.log_path.read_text(errors="replace")


def test_new_voter_is_caught_up_by_snapshot(cluster_factory, tmp_path):
    cp = kafka_clients_classpath(tmp_path)
    c = cluster_factory(controllers=3, observers=1, overrides={"metadata.log.max.record.bytes.between.snapshots": "8192"})
    adm = admin(c.nodes[0])
    names = [f"early-{i}" for i in range(200)]
    for name in names:
        create(adm, name, partitions=1)
    # The leader has snapshotted and purged the log before these (it keeps the last 100).
    time.sleep(1)
    new = c.node(4)
    state = java_admin(cp, c.nodes[0].bootstrap, "add", "4", new.host, str(new.controller_port))
    assert 4 in [v["id"] for v in state["voters"]]
    log = new.log_path.read_text(errors="replace")
    assert "installed metadata snapshot from the leader" in log, "the new voter replayed the log instead"
    assert new.quorum()["leader"] in (1, 2, 3)
    assert topic_ids(admin(new), names) == topic_ids(adm, names)


def _iptables(*args: str) -> None:
    subprocess.run(["iptables", "-w", *args], check=True, capture_output=True)


def isolate(ip: str, others: list[str]) -> list[list[str]]:
    """Drops every packet between `ip` and `others` (each node's quorum traffic leaves from its
    own address; the test's client connections, from the node's address to itself, pass)."""
    rules = []
    for o in others:
        for src, dst in ((ip, o), (o, ip)):
            rule = ["OUTPUT", "-s", src, "-d", dst, "-j", "DROP"]
            _iptables("-I", *rule)
            rules.append(rule)
    return rules


def test_partitioned_leader_commits_nothing_and_the_majority_moves_on(cluster_factory):
    if shutil.which("iptables") is None or os.geteuid() != 0:
        pytest.fail("this test needs root and iptables (apt-get install iptables) to partition a node", pytrace=False)
    c = cluster_factory(controllers=3)
    old = controller_of(c.nodes[0])
    isolated = c.node(old)
    majority = [n for n in c.nodes if n is not isolated]
    create(admin(majority[0]), "before-partition", partitions=3)
    wait_until(lambda: isolated.sees("before-partition"), 15, "isolated node has the topic before")

    rules = isolate(isolated.host, [n.host for n in majority])
    try:
        t0 = time.monotonic()

        def majority_leader() -> int:
            return controller_of(majority[0])

        wait_until(lambda: majority_leader() not in (-1, old), 30, "the majority elects a new leader")
        elected = time.monotonic() - t0
        new = majority_leader()
        for i in range(5):
            create(admin(majority[1]), f"majority-{i}", partitions=1)

        outcome: dict[str, str] = {}

        def create_on_minority():
            try:
                create(admin(isolated), "from-minority", partitions=1)
                outcome["r"] = "created"
            except Exception as e:  # noqa: BLE001 - any failure is a valid outcome here
                outcome["r"] = f"failed: {e}"

        t = threading.Thread(target=create_on_minority, daemon=True)
        t.start()
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            minority_view = isolated.view()
            assert not any(x.startswith("majority-") for x in minority_view), "the isolated node applied records it cannot have committed"
            assert "from-minority" not in minority_view, "the isolated node committed a topic without a majority"
            assert "from-minority" not in majority[0].view(), "a write through the isolated node reached the majority"
            assert majority_leader() == new, "the majority's leader changed while the minority was cut off"
            time.sleep(0.5)
    finally:
        for rule in rules:
            _iptables("-D", *rule)
    print(f"\nnew leader {new} elected {elected:.2f}s after node {old} was cut off; write through the isolated node: {outcome.get('r', 'pending')}")

    names = ["before-partition"] + [f"majority-{i}" for i in range(5)]
    wait_until(lambda: isolated.sees(*names), 60, "the healed node catches up")
    t.join(60)
    # A write pending on the isolated node may still land through the new leader after healing
    # (the broker retries against the active controller); either way every node converges.
    views: list[set] = []

    def agree() -> bool:
        views[:] = [set(n.view()) for n in c.nodes]
        return views[0] == views[1] == views[2]

    wait_until(agree, 60, f"every node agrees on the topics after healing ({views})")
    ids = [topic_ids(admin(n), sorted(views[0])) for n in c.nodes]
    assert ids[0] == ids[1] == ids[2]


def test_partitioned_follower_elects_nobody_commits_nothing_and_catches_up(cluster_factory):
    if shutil.which("iptables") is None or os.geteuid() != 0:
        pytest.fail("this test needs root and iptables (apt-get install iptables) to partition a node", pytrace=False)
    c = cluster_factory(controllers=3)
    leader = controller_of(c.nodes[0])
    follower = next(n for n in c.nodes if n.node_id != leader)
    majority = [n for n in c.nodes if n is not follower]
    create(admin(majority[0]), "before-cut", partitions=3)
    wait_until(lambda: follower.sees("before-cut"), 15, "the follower has the topic before")
    version = follower.metadata()["version"]
    term = follower.metadata()["raft"]["term"]
    majority_term = majority[0].metadata()["raft"]["term"]

    rules = isolate(follower.host, [n.host for n in majority])
    roles, terms = set(), []
    try:
        for i in range(5):
            create(admin(majority[0]), f"while-cut-{i}", partitions=1)
        # Several election timeouts (1 s each): the follower's elections can never win.
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            md = follower.metadata()
            roles.add(md["raft"]["role"])
            terms.append(md["raft"]["term"])
            assert md["raft"]["role"] != "Leader", f"the isolated follower made itself leader: {md['raft']}"
            assert md["version"] == version, "the isolated follower applied records it cannot have committed"
            assert controller_of(majority[0]) == leader, "the majority's leader changed while a follower was cut off"
            time.sleep(0.5)
        create(admin(majority[1]), "while-cut-last", partitions=1)
    finally:
        for rule in rules:
            _iptables("-D", *rule)
    print(f"\nisolated follower {follower.node_id}: roles {sorted(roles)}, term {term} -> {terms[-1]}; "
          f"majority: leader {leader}, term {majority_term} -> {majority[0].metadata()['raft']['term']}")

    names = ["before-cut", "while-cut-last"] + [f"while-cut-{i}" for i in range(5)]
    wait_until(lambda: follower.sees(*names), 60, "the healed follower catches up")
    views: list[dict] = []

    def agree() -> bool:
        views[:] = [n.view() for n in c.nodes]
        return views[0] == views[1] == views[2]

    wait_until(agree, 60, f"every node agrees after healing ({views})")
    c.wait_ready(60)  # its broker is unfenced again
    print(f"after healing: leader {controller_of(c.nodes[0])}, term {majority[0].metadata()['raft']['term']}")


def _format(node: Node, *flags: str) -> str:
    r = subprocess.run([str(node.binary), "format", *node.command()[1:], *flags], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"format {flags} of node {node.node_id} failed:\n{r.stdout}{r.stderr}"
    return r.stdout.strip()


def test_dynamic_quorum_starts_standalone_and_grows_by_auto_join(request, tmp_path):
    """KIP-853 dynamic quorum: controller.quorum.bootstrap.servers, no voters in any config.
    Node 1 is formatted --standalone; nodes 2 and 3 --no-initial-controllers with
    controller.quorum.auto.join.enable; node 4 is a broker. The cluster id comes from format."""
    binary = require_broker_binary()
    hosts = {i: node_host(i) for i in (1, 2, 3, 4)}
    cports = {i: free_port_on(hosts[i]) for i in (1, 2, 3)}
    bootstrap = ",".join(f"{hosts[i]}:{cports[i]}" for i in (1, 2, 3))
    nodes: list[Node] = []
    for i in (1, 2, 3, 4):
        o = {
            "node.id": str(i),
            "process.roles": "broker,controller" if i in cports else "broker",
            "controller.quorum.bootstrap.servers": bootstrap,
            "num.partitions": "3",
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
        }
        if i in (2, 3):
            o["controller.quorum.auto.join.enable"] = "true"
        nodes.append(Node(node_id=i, host=hosts[i], controller_port=cports.get(i), binary=binary,
                          port=free_port_on(hosts[i]), data_dir=tmp_path / f"node-{i}",
                          log_path=tmp_path / f"node-{i}.log", overrides=o))
    request.node._oxbow_brokers = nodes
    try:
        # Unformatted, and no cluster.id: refused with a message that says what to do.
        lone = subprocess.run(nodes[3].command(), capture_output=True, text=True, timeout=60)
        assert lone.returncode != 0 and "oxbow-broker format" in lone.stderr, lone.stderr[-2000:]
        cid = "dynamic-quorum-cluster-1"
        print("\n" + _format(nodes[0], "--cluster-id", cid, "--standalone"))
        for n in nodes[1:3]:
            _format(n, "--cluster-id", cid, "--no-initial-controllers")
        _format(nodes[3], "--cluster-id", cid)
        t0 = time.monotonic()
        for n in nodes:
            n.start()

        def voters() -> list[int]:
            try:
                return sorted(v["node_id"] for v in nodes[3].quorum()["voters"])
            except (OSError, ValueError, KeyError):
                return []

        wait_until(lambda: voters() == [1, 2, 3], 60, f"nodes 2 and 3 auto-join as voters (voters {voters()})")
        print(f"voters 1, 2, 3 after {time.monotonic() - t0:.2f}s (node 1 alone at first)")
        cp = kafka_clients_classpath(tmp_path)
        described = java_admin(cp, nodes[3].bootstrap, "describe")
        assert sorted(v["id"] for v in described["voters"]) == [1, 2, 3], described
        assert described["nodes"]["2"] == f"{hosts[2]}:{cports[2]}", described

        create(admin(nodes[3]), "dynamic-1", partitions=4)
        wait_until(lambda: all(n.sees("dynamic-1") for n in nodes), 15, "every node sees the topic")
        leader = nodes[3].leader()
        nodes[leader - 1].kill()
        wait_until(lambda: nodes[3].leader() not in (-1, leader), 30, "a new leader among the other voters")
        create(admin(nodes[3]), "dynamic-2", partitions=2)
        nodes[leader - 1].start()
        wait_until(lambda: all(n.sees("dynamic-2") for n in nodes), 30, "the killed voter catches up")
        assert voters() == [1, 2, 3], "the restarted voter is still a voter (membership in the log)"
        for n in nodes:
            props = (n.data_dir / "meta.properties").read_text()
            assert f"cluster.id={cid}" in props, props
    finally:
        for n in nodes:
            n.close()


REPO = Path(__file__).resolve().parents[2]


def kafka_clients_classpath(tmp_path) -> str:
    """The Java suite's kafka-clients classpath (Maven resolves it into ~/.m2 if needed)."""
    out = tmp_path / "cp.txt"
    r = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(REPO / "tests" / "java" / "pom.xml"), "dependency:build-classpath",
         f"-Dmdep.outputFile={out}", "-Dmdep.includeScope=test"],
        capture_output=True, text=True, timeout=600,
    )
    if r.returncode != 0:
        pytest.fail(f"mvn dependency:build-classpath failed (Maven and Java 17 are needed for this test):\n{r.stdout}\n{r.stderr}", pytrace=False)
    return out.read_text().strip()


def java_admin(cp: str, bootstrap: str, *args: str) -> dict:
    r = subprocess.run(
        ["java", "-cp", cp, str(REPO / "tests" / "clients" / "java" / "RaftVoters.java"), bootstrap, *args],
        capture_output=True, text=True, timeout=180,
    )
    if r.returncode != 0:
        pytest.fail(f"RaftVoters {' '.join(args)} failed:\n{r.stdout}\n{r.stderr[-3000:]}", pytrace=False)
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_voters_added_and_removed_through_the_java_admin_client_under_load(cluster_factory, tmp_path):
    cp = kafka_clients_classpath(tmp_path)
    c = cluster_factory(controllers=3, observers=1)
    new = c.node(4)
    bootstrap = c.nodes[0].bootstrap
    steps = [java_admin(cp, bootstrap, "describe")]
    assert sorted(v["id"] for v in steps[0]["voters"]) == [1, 2, 3]

    # Load: topics created one after another through node 1 the whole time.
    adm = admin(c.nodes[0])
    made: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            try:
                create(adm, f"membership-{i}", partitions=1)
                made.append(f"membership-{i}")
            except KafkaException as e:
                failures.append(str(e.args[0]))
            i += 1

    t = threading.Thread(target=load)
    t.start()
    try:
        wait_until(lambda: len(made) >= 5, 60, "load running")
        steps.append(java_admin(cp, bootstrap, "add", "4", new.host, str(new.controller_port)))
        assert sorted(v["id"] for v in steps[-1]["voters"]) == [1, 2, 3, 4], steps[-1]
        leader = steps[-1]["leader"]
        old = next(i for i in (1, 2, 3) if i != leader)
        before = len(made)
        wait_until(lambda: len(made) >= before + 5, 60, "load continues with 4 voters")
        steps.append(java_admin(cp, bootstrap, "remove", str(old)))
        voters = sorted(v["id"] for v in steps[-1]["voters"])
        assert voters == sorted({1, 2, 3, 4} - {old}), steps[-1]
        before = len(made)
        wait_until(lambda: len(made) >= before + 5, 60, "load continues after the removal")
        # The removed voter, still running as an observer, comes back as a voter; then the
        # active controller itself is removed: it resigns and the others elect a new one.
        steps.append(java_admin(cp, bootstrap, "add", str(old), c.node(old).host, str(c.node(old).controller_port)))
        assert sorted(v["id"] for v in steps[-1]["voters"]) == [1, 2, 3, 4], steps[-1]
        removed_leader = steps[-1]["leader"]
        before = len(made)
        steps.append(java_admin(cp, bootstrap, "remove", str(removed_leader)))
        wait_until(lambda: java_admin(cp, bootstrap, "describe")["leader"] not in (-1, removed_leader), 60,
                   "a new active controller among the remaining voters")
        steps.append(java_admin(cp, bootstrap, "describe"))
        assert sorted(v["id"] for v in steps[-1]["voters"]) == sorted({1, 2, 3, 4} - {removed_leader}), steps[-1]
        wait_until(lambda: len(made) >= before + 5, 60, "load continues after the leader's removal")
        old = removed_leader
    finally:
        stop.set()
        t.join(120)
    for s in steps:
        print(f"\nDescribeQuorum: leader {s['leader']} epoch {s['epoch']} hw {s['hw']} voters {s['voters']} observers {s['observers']}")
    assert not failures, f"topic creation failed during membership changes: {failures[:3]}"
    assert str(4) in steps[1]["nodes"] and steps[1]["nodes"]["4"] == f"{new.host}:{new.controller_port}"

    # The new voter holds the whole metadata: stop a remaining old voter, and the quorum of the
    # other two (one of them the new node) still commits.
    survivors = [n for n in c.nodes if n.node_id not in (old,)]
    other_old = next(n for n in survivors if n.node_id not in (4, steps[-1]["leader"]))
    other_old.stop()
    # Every other node, the removed voter included (it now follows the image as an observer).
    live = [n for n in c.nodes if n is not other_old]
    create(admin(c.node(4)), "after-membership-change", partitions=1)
    for n in live:
        wait_until(lambda: n.sees(*made + ["after-membership-change"]), 60,
                   f"node {n.node_id} has every topic")


def test_single_node_data_from_before_the_quorum_is_imported(broker_factory):
    """A data dir written by a version without the quorum (topics in __oxbow_meta/topics.json)
    keeps its topics, ids, configs and records when the new broker starts on it."""
    b = broker_factory()
    create(admin(b.bootstrap), "old-topic", partitions=2, config={"retention.ms": "86400000"})
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(20):
        p.produce("old-topic", value=f"r{i}".encode(), partition=i % 2)
    flush_all(p)
    old_id = topic_ids(admin(b.bootstrap), ["old-topic"])["old-topic"]
    b.stop()

    # What the pre-quorum version left: topics.json and the producer id block, no Raft state.
    shutil.rmtree(b.data_dir / "__cluster_metadata-raft")
    meta = b.data_dir / "__oxbow_meta"
    meta.mkdir(exist_ok=True)
    topic_id = _kafka_uuid(old_id)
    (meta / "topics.json").write_text(json.dumps({
        "version": 1,
        "topics": [{"name": "old-topic", "id": topic_id, "partitions": 2,
                    "configs": {"retention.ms": "86400000"}, "leader_epoch": 0}],
    }))
    (meta / "producer-id-block").write_text("5000")

    b.start()
    adm = admin(b.bootstrap)
    assert topic_ids(adm, ["old-topic"]) == {"old-topic": old_id}
    got = consume_all(b, "old-topic", partitions=[0, 1])
    assert sorted(r.value.decode() for recs in got.values() for r in recs) == sorted(f"r{i}" for i in range(20))
    assert (meta / "topics.json.imported").exists() and not (meta / "topics.json").exists()
    assert "imported the single-node metadata" in b.log_path.read_text(errors="replace")


def _kafka_uuid(text: str) -> str:
    """Kafka's base64 topic id -> the UUID string serde writes."""
    import base64

    return str(uuid.UUID(bytes=base64.urlsafe_b64decode(text + "==")))
