"""A local multi-node Oxbow cluster on loopback addresses, for tests and for trying it out.

Node i (1-based) listens on 127.0.1.i: the client listener on `client_port`, and, if it is a
controller, the CONTROLLER listener (metadata quorum, gRPC) on `controller_port`. Each node has
its own data dir and log file. Voters are nodes 1..controllers (combined broker,controller, or
controller-only with `dedicated_controllers`: then only the CONTROLLER listener); nodes after
them are broker-only.

Used by test_quorum.py and by the `tests/cluster` command (see docs/testing.md).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

from oxbow_harness import Broker, free_port as free_port_on

CLUSTER_ID = "oxbow-test-cluster-0001"


def node_host(i: int) -> str:
    return f"127.0.1.{i}"




class Node(Broker):
    """One node: a Broker process with its host, roles and quorum settings."""

    def __init__(self, node_id: int, host: str, controller_port: int | None, broker: bool = True, **kw) -> None:
        super().__init__(**kw)
        self.node_id = node_id
        #: False for a controller-only node: it has no client listener, and `port` (what the
        #: harness waits on at startup) is its CONTROLLER port.
        self.broker = broker
        self.host = host
        self.listen_host = host
        self.controller_port = controller_port
        self.http_port = free_port_on(host)
        self.overrides["oxbow.http.listener"] = f"{host}:{self.http_port}"

    def quorum(self, timeout: float = 10.0) -> dict:
        """The quorum as the active controller reports it, through this node (GET /quorum)."""
        with urllib.request.urlopen(f"http://{self.host}:{self.http_port}/quorum", timeout=timeout) as r:
            return json.loads(r.read())

    def metadata(self, timeout: float = 10.0) -> dict:
        """This node's own metadata image (GET /metadata), whatever the rest of the cluster says."""
        with urllib.request.urlopen(f"http://{self.host}:{self.http_port}/metadata", timeout=timeout) as r:
            return json.loads(r.read())

    def view(self) -> dict[str, tuple]:
        """name -> (partition count, leaders in partition order) in this node's image."""
        topics = self.metadata()["topics"]
        return {name: (len(t["partitions"]), tuple(p["leader"] for p in t["partitions"])) for name, t in topics.items()}

    def sees(self, *names: str) -> bool:
        """Whether this node's image has every topic in `names`; False while the node does not
        answer yet (not listening, or 503 before it joined the quorum after a restart)."""
        try:
            view = self.view()
        except (OSError, ValueError):
            return False
        return all(n in view for n in names)

    def leader(self) -> int:
        """The active controller as this node learns it from the quorum; -1 if none answers."""
        try:
            q = self.quorum()
        except (OSError, ValueError):
            return -1
        return q["leader"] if q.get("leader") is not None else -1

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [str(self.binary), "--override", f"log.dirs={self.data_dir}"]
        listeners = [f"PLAINTEXT://{self.host}:{self.port}"] if self.broker else []
        if self.controller_port is not None:
            listeners.append(f"CONTROLLER://{self.host}:{self.controller_port}")
        listeners = ",".join(listeners)
        cmd += ["--override", f"listeners={listeners}"]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = 60.0) -> None:
        super().start(timeout)

    def accepting(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False


class Cluster:
    """`controllers` combined nodes plus `brokers` broker-only nodes."""

    def __init__(
        self,
        binary: Path,
        root: Path,
        controllers: int = 3,
        brokers: int = 0,
        overrides: dict[str, str] | None = None,
        first_host: int = 1,
        observers: int = 0,
        dedicated_controllers: bool = False,
    ) -> None:
        """`observers`: extra controllers (after the brokers) that are not initial voters; they
        follow the metadata and can be added to the quorum with AddRaftVoter.
        `dedicated_controllers`: the voters and observers are controller-only nodes."""
        self.root = root
        self.nodes: list[Node] = []
        ids = range(first_host, first_host + controllers + brokers + observers)
        hosts = {i: node_host(i) for i in ids}
        voter_ids = list(ids)[:controllers]
        observer_ids = list(ids)[controllers + brokers:]
        cports = {i: free_port_on(hosts[i]) for i in voter_ids + observer_ids}
        voters = ",".join(f"{i}@{hosts[i]}:{cports[i]}" for i in voter_ids)
        for i in ids:
            controller = i in cports
            broker = not (controller and dedicated_controllers)
            o = {
                "node.id": str(i),
                "process.roles": ("broker,controller" if broker else "controller") if controller else "broker",
                "controller.quorum.voters": voters,
                "cluster.id": CLUSTER_ID,
                "num.partitions": "3",
                "broker.session.timeout.ms": "3000",
                "broker.heartbeat.interval.ms": "500",
            }
            o.update(overrides or {})
            self.nodes.append(
                Node(
                    node_id=i,
                    host=hosts[i],
                    controller_port=cports.get(i),
                    broker=broker,
                    binary=binary,
                    port=free_port_on(hosts[i]) if broker else cports[i],
                    data_dir=root / f"node-{i}",
                    log_path=root / f"node-{i}.log",
                    overrides=o,
                )
            )

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    @property
    def controllers(self) -> list[Node]:
        return [n for n in self.nodes if n.controller_port is not None]

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes if n.broker]

    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.brokers if n.running())

    def start(self, timeout: float = 60.0, order: list[int] | None = None, stagger: float = 0.0) -> None:
        """Starts every node at once (a quorum needs a majority before anyone can register), or
        in `order` (node ids) with `stagger` seconds between them."""
        for n in self.nodes:
            n.data_dir.mkdir(parents=True, exist_ok=True)
        import subprocess

        for k, n in enumerate([self.node(i) for i in order] if order else self.nodes):
            if k and stagger:
                time.sleep(stagger)
            n.starts += 1
            n._log_marker(f"start #{n.starts}: {' '.join(n.command())}")
            log = open(n.log_path, "ab")
            n.proc = subprocess.Popen(
                n.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=n.data_dir.parent,
                start_new_session=True,
            )
            log.close()
        deadline = time.monotonic() + timeout
        pending = list(self.nodes)
        while pending and time.monotonic() < deadline:
            for n in list(pending):
                if n.proc.poll() is not None:
                    raise RuntimeError(f"node {n.node_id} exited with {n.proc.returncode}:\n{n.log_tail()}")
                if n.accepting():
                    pending.remove(n)
            time.sleep(0.05)
        if pending:
            raise RuntimeError(f"nodes {[n.node_id for n in pending]} did not start within {timeout}s")
        self.wait_ready(max(1.0, deadline - time.monotonic()))

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until every running node's metadata lists every running node as a broker."""
        from confluent_kafka.admin import AdminClient

        running = [n for n in self.brokers if n.running()]
        want = sorted(n.node_id for n in running)
        deadline = time.monotonic() + timeout
        for n in running:
            adm = AdminClient({"bootstrap.servers": n.bootstrap, "socket.timeout.ms": 5000})
            while True:
                try:
                    seen = sorted(adm.list_topics(timeout=5).brokers)
                except Exception:  # noqa: BLE001 - retried until the deadline
                    seen = []
                if seen == want:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node {n.node_id} lists brokers {seen}, expected {want}")
                time.sleep(0.1)

    def close(self) -> None:
        for n in self.nodes:
            n.close()

    def describe(self) -> str:
        return json.dumps(
            [
                {
                    "node": n.node_id,
                    "roles": n.overrides["process.roles"],
                    "bootstrap": n.bootstrap if n.broker else None,
                    "controller": f"{n.host}:{n.controller_port}" if n.controller_port else None,
                    "http": f"http://{n.host}:{n.http_port}/quorum",
                    "data": str(n.data_dir),
                    "log": str(n.log_path),
                    "pid": n.proc.pid if n.proc else None,
                }
                for n in self.nodes
            ],
            indent=2,
        )
