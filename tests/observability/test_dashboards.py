"""Every query of every dashboard and alert rule Oxbow ships (deploy/observability), run against
a real OpenTelemetry Collector (deploy/observability/collector, built from its Go modules by
tests/observability/build) and a real Prometheus (Debian's package) that scrapes it, while
three Oxbow nodes export their metrics over OTLP and serve a known workload:

  - N records produced to `orders` (6 partitions, RF 3); a group reads M of them and commits
    exactly what it read on every partition, so its lag is N - M;
  - every dashboard query and variable returns data, and the values the workload fixes are
    right: records in = N, bytes in = the bytes of `orders`' segment files on disk, lag = N - M,
    offline partitions 0, one active controller;
  - a SIGKILL of the node leading an RF 1 topic makes the offline partitions 1 and
    OxbowOfflinePartitions fire; under-min-ISR, under-replicated and lag-growing rules match
    (their expressions return data, their alerts are pending or firing);
  - a SIGKILL of the active controller too leaves no quorum: OxbowNoActiveController matches.

Run: python3 -m pytest tests/observability -q (OXBOW_BROKER_BIN: the broker binary;
OXBOW_OTELCOL_BIN: the collector, else tests/observability/build makes it; `prometheus` on PATH).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[2]
OBS = ROOT / "deploy" / "observability"
sys.path.insert(0, str(ROOT / "tests" / "clients"))
from oxbow_cluster import Cluster  # noqa: E402

import graphs  # noqa: E402  (beside this file)
from oxbow_harness import free_port, require_broker_binary, wait_until  # noqa: E402

N = 2000
M = 1200
MORE = 500
VALUE = b"v" * 200


def collector_binary() -> str:
    if os.environ.get("OXBOW_OTELCOL_BIN"):
        return os.environ["OXBOW_OTELCOL_BIN"]
    # (The build's own messages and errors go to the test's stderr.)
    return subprocess.run([str(ROOT / "tests" / "observability" / "build")], check=True,
                          stdout=subprocess.PIPE, text=True).stdout.strip()


class Process:
    """A server started for the test, its output in a file, stopped at the end."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict | None = None) -> None:
        self.name, self.log = name, log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **(env or {})}, start_new_session=True)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params) -> dict:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """The instant vector of `expr` now ([] when it has no series)."""
        data = self.get("/api/v1/query", query=expr)
        return data["result"] if data["resultType"] == "vector" else [{"value": data["result"]}]

    def value(self, expr: str) -> float | None:
        r = self.query(expr)
        return float(r[0]["value"][1]) if len(r) == 1 else None

    def alerts(self) -> dict[str, str]:
        """alert name -> its most advanced state (firing > pending)."""
        out: dict[str, str] = {}
        for a in self.get("/api/v1/alerts")["alerts"]:
            if out.get(a["labels"]["alertname"]) != "firing":
                out[a["labels"]["alertname"]] = a["state"]
        return out

    def rules(self) -> dict[str, str]:
        """alert name -> its expression, as Prometheus loaded them from alerts.yaml."""
        return {r["name"]: r["query"] for g in self.get("/api/v1/rules")["groups"] for r in g["rules"]
                if r["type"] == "alerting"}


def wait_value(prom: Prometheus, expr: str, want: float, timeout: float) -> None:
    """Until `expr` is `want` in Prometheus; fails showing what it last was."""
    deadline = time.monotonic() + timeout
    while True:
        got = prom.query(expr)
        if len(got) == 1 and float(got[0]["value"][1]) == want:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {expr} = {want}: it is {got}", pytrace=False)
        time.sleep(0.5)


# Dashboards of what this test does not run, and the test that runs their queries instead.
ELSEWHERE = {"oxbow-operator": "tests/k8s/helm_e2e.py (the operator needs Kubernetes)"}


def dashboards() -> dict[str, dict]:
    """Every shipped dashboard but those of ELSEWHERE."""
    return {p.stem: json.loads(p.read_text()) for p in sorted((OBS / "dashboards").glob("*.json"))
            if p.stem not in ELSEWHERE}


# What Grafana puts in place of the dashboards' variables: every instance, topic and group; the
# rate interval for a 1 s scrape interval; a 5 minute time range.
GRAFANA = {"$instance": ".*", "$topic": ".*", "$group": ".*", "$__rate_interval": "15s", "$__range": "5m"}


def as_prometheus_runs(expr: str) -> str:
    for var, value in GRAFANA.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"a variable the test does not know in {expr}"
    return expr


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, query) for every target of every panel."""
    out = []
    for uid, d in dashboards().items():
        for p in d["panels"]:
            for t in p.get("targets", []):
                out.append((uid, p["title"], as_prometheus_runs(t["expr"])))
    return out


def variable_queries() -> list[tuple[str, str, str, str]]:
    """(dashboard, variable, metric, label) of every label_values() variable."""
    out = []
    for uid, d in dashboards().items():
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                q = v["query"]
                assert q.startswith("label_values(") and q.endswith(")"), q
                metric, label = (x.strip() for x in q[len("label_values("):-1].split(","))
                out.append((uid, v["name"], metric, label))
    return out


def screenshots(prom: Prometheus, out: Path) -> None:
    """One PNG per dashboard (a page per ten queries): its panels' queries as graphs on
    Prometheus' own graph page over the test's last 2 minutes (the workload, then the two
    SIGKILLs), rendered by headless Chromium (tests/observability/screenshots)."""
    for uid, d in dashboards().items():
        exprs = [as_prometheus_runs(t["expr"]) for p in d["panels"] for t in p.get("targets", [])]
        graphs.render(prom.base, uid, exprs, out, "2m")


def dir_bytes(node_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for d in node_dir.glob(f"{topic}-*") for f in d.glob("*.log"))


@pytest.fixture
def stack(tmp_path, monkeypatch):
    """(cluster, prometheus, processes): the collector, Prometheus scraping it with the shipped
    alert rules, and three combined nodes exporting to the collector every second."""
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is not installed (tests/run-all installs Debian's package)")
    otlp, exporter, prom_port = free_port(), free_port(), free_port()
    procs: list[Process] = []
    collector = Process("collector", [collector_binary(), "--config", str(OBS / "collector.yaml")],
                        tmp_path / "collector.log",
                        {"OXBOW_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{free_port()}",
                         "OXBOW_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{otlp}",
                         "OXBOW_PROMETHEUS_ENDPOINT": f"127.0.0.1:{exporter}",
                         # A killed node's series go within seconds, not the shipped minute (with
                         # room for a live node's exports to stall on a loaded machine).
                         "OXBOW_METRIC_EXPIRATION": "15s"})
    procs.append(collector)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(OBS / "alerts.yaml")],
        # honor_labels: job and instance are the collector's (from each node's resource).
        "scrape_configs": [{"job_name": "oxbow-collector", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{exporter}"]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prom = Process("prometheus", ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                                  f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                  f"--web.listen-address=127.0.0.1:{prom_port}"],
                   tmp_path / "prometheus.log")
    procs.append(prom)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{otlp}")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "1000")
    # The shipped collector has a metrics pipeline only (it answers traces with 404), as the
    # operator sets for Clusters without telemetry.traceSampleRatio.
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    cluster = Cluster(require_broker_binary(), tmp_path / "cluster", 3, 0,
                      {"replica.lag.time.max.ms": "5000", "offsets.topic.replication.factor": "3"})
    try:
        cluster.start()
        p = Prometheus(prom_port)

        def up() -> bool:
            for x in procs:
                x.alive()
            try:
                return p.value("count(oxbow_broker_connections)") == 3
            except OSError:
                return False

        wait_until(up, 60, "Prometheus to see three nodes' metrics through the collector")
        yield cluster, p, procs
    except BaseException:
        for x in procs:
            print(f"---- {x.name} log\n{x.tail()}")
        raise
    finally:
        cluster.close()
        for x in procs:
            x.stop()


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    pr = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        pr.produce(topic, value=VALUE, key=str(i).encode(), partition=i % partitions)
        pr.poll(0)
    assert pr.flush(60) == 0


def consume_and_commit(bootstrap: str, topic: str, partitions: int, m: int) -> None:
    """Reads `m` records of `topic` as group `billing` and commits, on every partition, the
    offset after what it read there (0 where it read nothing): lag = produced - m."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    next_offset = {i: 0 for i in range(partitions)}
    got, deadline = 0, time.monotonic() + 60
    while got < m and time.monotonic() < deadline:
        msg = c.poll(1)
        if msg is None or msg.error():
            continue
        next_offset[msg.partition()] = msg.offset() + 1
        got += 1
    assert got == m, f"read {got} of {m}"
    c.commit(offsets=[TopicPartition(topic, i, o) for i, o in next_offset.items()], asynchronous=False)
    c.close()


def join_and_leave(bootstrap: str, topic: str) -> None:
    """A consumer of group `audit` subscribes to `topic` (a classic rebalance that completes
    when it has its assignment), then leaves without committing."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "audit", "enable.auto.commit": False})
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while not c.assignment():
        assert time.monotonic() < deadline, "audit's consumer got no assignment"
        c.poll(0.5)
    c.close()


def test_every_dashboard_and_alert_query_returns_the_workloads_figures(stack):
    cluster, prom, procs = stack
    boot = cluster.bootstrap()
    admin = AdminClient({"bootstrap.servers": boot})
    # orders flushes every 100 records (flush.messages), so the flush panels have data.
    for f in admin.create_topics([NewTopic("orders", 6, 3, config={"flush.messages": "100"}),
                                  NewTopic("strict", 3, 3, config={"min.insync.replicas": "3"})]).values():
        f.result(30)
    produce(boot, "orders", N, 6)
    consume_and_commit(boot, "orders", 6, M)
    join_and_leave(boot, "orders")

    # The values the workload fixes, as Prometheus has them from the collector.
    wait_value(prom, 'sum(oxbow_topic_produced_records_total{topic="orders"})', N, 60)
    wait_value(prom, 'max(oxbow_consumer_group_lag{group="billing",topic="orders"})', N - M, 60)
    # RF 3 on three nodes: once every follower has caught up, every node holds every partition
    # byte for byte, and the bytes producers appended are those of the segment files on disk.
    produced = prom.value('sum(oxbow_topic_produced_bytes_total{topic="orders"})')
    wait_value(prom, 'sum(oxbow_topic_log_size_bytes{topic="orders"})', 3 * produced, 60)
    on_disk = dir_bytes(cluster.node(1).data_dir, "orders")
    assert on_disk > N * len(VALUE)
    assert produced == on_disk
    wait_value(prom, "sum(oxbow_controller_active)", 1, 30)
    wait_value(prom, "max(oxbow_controller_partitions_offline)", 0, 30)
    wait_value(prom, "sum(oxbow_broker_partitions_under_min_isr)", 0, 30)
    partitions = sum(len(t.partitions) for t in admin.list_topics(timeout=10).topics.values())
    wait_value(prom, 'sum(oxbow_broker_partitions{role="leader"})', partitions, 30)
    wait_until(lambda: (prom.value('sum(oxbow_topic_fetched_bytes_total{topic="orders"})') or 0) >= on_disk, 30,
               "bytes out of orders to reach its bytes on disk (the consumer's and the followers' reads)")
    # billing (offsets, no members) and audit (its member left) are both Empty.
    wait_value(prom, 'sum(oxbow_coordinator_groups{type="classic",state="Empty"})', 2, 30)
    # audit's consumer joined a classic group that became Stable: one rebalance, then its
    # leaving ended with nobody (not counted).
    wait_value(prom, 'sum(oxbow_coordinator_rebalances_total{type="classic"})', 1, 30)
    wait_value(prom, 'sum(oxbow_coordinator_rebalances_total{type="consumer"})', 0, 30)
    # Flushes happened (leaders' and followers' logs of orders) and took some time; the active
    # controller committed the topics' creation and sees both other voters (caught up: lag 0).
    # (At least one per partition's leader: a batch can carry more than 100 records.)
    wait_until(lambda: (prom.value("sum(oxbow_log_flushes_total)") or 0) >= 6, 30,
               "the flush.messages flushes of orders to be counted")
    assert prom.value("sum(oxbow_log_flush_time_milliseconds_total)") is not None
    assert (prom.value("sum(oxbow_quorum_commits_total)") or 0) >= 2
    wait_value(prom, "count(oxbow_quorum_follower_lag)", 2, 30)
    wait_value(prom, "max(oxbow_quorum_follower_lag)", 0, 30)
    # Every produce request received was answered and timed once.
    wait_value(prom, 'sum(oxbow_broker_requests_total{api="Produce"}) - '
               'sum(oxbow_broker_request_duration_seconds_count{api="Produce"})', 0, 30)

    # Every dashboard query and variable returns data.
    queries = panel_queries()
    assert len(queries) >= 20 and len(dashboards()) == 4
    for uid, where in ELSEWHERE.items():
        print(f"{uid}: its queries run in {where}, not here")
    # (Range functions need two samples of a series: the lag's may be a second old.)
    empty = queries
    deadline = time.monotonic() + 30
    while empty and time.monotonic() < deadline:
        empty = [(d, t, q) for d, t, q in empty if not prom.query(q)]
        time.sleep(1)
    assert not empty, f"dashboard queries without data: {empty}"
    for uid, name, metric, label in variable_queries():
        values = prom.get(f"/api/v1/label/{label}/values", **{"match[]": metric})
        assert values, f"variable {name} of {uid} has no values"

    rules = prom.rules()
    assert set(rules) == {"OxbowOfflinePartitions", "OxbowNoActiveController", "OxbowUnderMinIsrPartitions",
                          "OxbowUnderReplicatedPartitions", "OxbowConsumerLagGrowing"}
    # (Lag and replication warnings can be pending from the workload's first seconds.)
    critical = {"OxbowOfflinePartitions", "OxbowNoActiveController", "OxbowUnderMinIsrPartitions"}
    assert not critical & set(prom.alerts()), f"critical alerts in a healthy cluster: {prom.alerts()}"

    # Kill a node that is neither the active controller nor billing's coordinator, leading an
    # RF 1 topic of its own, once no partition is under-replicated (so that only that topic
    # goes offline).
    wait_until(lambda: cluster.nodes[0].leader() > 0, 30, "node 1 to name the active controller")
    controller = cluster.nodes[0].leader()
    coordinator = admin.describe_consumer_groups(["billing"])["billing"].result(30).coordinator.id
    victim = next(n for n in cluster.nodes if n.node_id not in (controller, coordinator))
    wait_value(prom, "sum(oxbow_broker_partitions_under_replicated)", 0, 60)
    admin.create_topics([NewTopic("fragile", 1, replica_assignment=[[victim.node_id]])])["fragile"].result(30)
    produce(boot, "fragile", 10, 1)
    produce(boot, "orders", MORE, 6)  # billing reads no more: its lag grows
    victim.kill()
    wait_value(prom, "max(oxbow_controller_partitions_offline)", 1, 60)
    wait_value(prom, 'max(oxbow_consumer_group_lag{group="billing",topic="orders"})', N + MORE - M, 60)
    wanted = {"OxbowOfflinePartitions": {"firing"},
              "OxbowUnderMinIsrPartitions": {"pending", "firing"},
              "OxbowUnderReplicatedPartitions": {"pending", "firing"},
              "OxbowConsumerLagGrowing": {"pending", "firing"}}
    deadline = time.monotonic() + 120
    while not all((have := prom.alerts()).get(a) in s for a, s in wanted.items()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for alerts {wanted}: they are {have}", pytrace=False)
        time.sleep(1)
    for name in wanted:
        assert prom.query(rules[name]), f"{name}'s expression returns no data"

    # Then the active controller (as the survivors see it now): one voter of three is left, and
    # it cannot be the active one.
    survivor = next(n for n in cluster.nodes if n.node_id != victim.node_id)
    wait_until(lambda: survivor.leader() > 0, 30, f"node {survivor.node_id} to name the active controller")
    controller = survivor.leader()
    cluster.node(controller).kill()
    wait_until(lambda: prom.alerts().get("OxbowNoActiveController") in ("pending", "firing"), 90,
               "OxbowNoActiveController pending or firing")
    assert prom.query(rules["OxbowNoActiveController"])
    wait_value(prom, "max(oxbow_controller_active)", 0, 30)
    for x in procs:
        x.alive()
    if os.environ.get("OXBOW_SCREENSHOTS"):
        screenshots(prom, Path(os.environ["OXBOW_SCREENSHOTS"]))
