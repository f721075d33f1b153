"""The broker's metrics: exported over OTLP/HTTP to a stand-in collector that decodes them with
the official OTLP protobufs (tests/k8s/otlp_sink.py), and served in Prometheus' text format on
the HTTP listener, with figures that match what real clients did. Bad endpoint settings stop
startup naming the variable."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oxbow_cluster import Cluster
from oxbow_harness import consume, create_topic, free_port, require_broker_binary, scrape

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))
from otlp_sink import Sink  # noqa: E402


@pytest.fixture
def sink():
    """A stand-in collector on a free port (its URL is `sink.url`)."""
    s = Sink("127.0.0.1", free_port())
    yield s
    s.close()


def traces_only(sink, sampler):
    """The broker's environment to export only traces, with `sampler`, to `sink`, promptly."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, "OTEL_METRICS_EXPORTER": "none",
            "OTEL_TRACES_SAMPLER": sampler, "OTEL_BSP_SCHEDULE_DELAY": "200"}


def latest(sink, name, **attrs):
    """The last value exported for metric `name` with these attributes, or None."""
    with sink.lock:
        values = [v for n, a, v in sink.points if n == name and all(a.get(k) == x for k, x in attrs.items())]
    return values[-1] if values else None


def wait_for(what, check, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_broker_exports_request_traffic_and_partition_metrics_over_otlp(broker_factory, sink):
    b = broker_factory(start=False)
    b.env = {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, "OTEL_METRIC_EXPORT_INTERVAL": "500",
             "OTEL_RESOURCE_ATTRIBUTES": "k8s.pod.name=events-broker-0"}
    b.start()
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(1000):
        p.produce("metered", value=b"x" * 100, partition=i % 4)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "metered", "auto.offset.reset": "earliest"})
    assert consume(c, "metered", 1000) == 1000

    wait_for("1000 produced records exported", lambda: latest(sink, "oxbow.broker.produced.records") == 1000)
    # Every partition is led here: metered's 4 and __consumer_offsets' (the group made it).
    hosted = sum(len(t.partitions) for t in AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
                 .topics.values())
    assert hosted == 4 + 50, hosted
    wait_for(f"{hosted} leader partitions", lambda: latest(sink, "oxbow.broker.partitions", role="leader") == hosted)
    assert latest(sink, "oxbow.broker.partitions", role="follower") == 0
    produced = latest(sink, "oxbow.broker.produced.bytes")
    assert produced is not None and produced > 100 * 1000, produced
    wait_for("fetched bytes", lambda: (latest(sink, "oxbow.broker.fetched.bytes") or 0) >= produced)
    assert (latest(sink, "oxbow.broker.requests", api="Produce") or 0) >= 1
    assert (latest(sink, "oxbow.broker.requests", api="Fetch") or 0) >= 1
    assert (latest(sink, "oxbow.broker.requests", api="JoinGroup") or 0) >= 1
    # The request duration histogram counts each answered produce request once.
    wait_for("the produce requests' durations", lambda: latest(sink, "oxbow.broker.request.duration", api="Produce")
             == latest(sink, "oxbow.broker.requests", api="Produce"))
    assert latest(sink, "oxbow.broker.partitions.under_replicated") == 0
    wait_for("two client connections open", lambda: (latest(sink, "oxbow.broker.connections") or 0) >= 2)
    assert (latest(sink, "oxbow.broker.log.size") or 0) >= produced
    assert latest(sink, "oxbow.controller.active") == 1
    with sink.lock:
        services = {(a.get("resource.service.name"), a.get("resource.service.instance.id"),
                     a.get("resource.k8s.pod.name")) for n, a, _ in sink.points if n.startswith("oxbow.")}
    assert services == {("oxbow-broker", "1", "events-broker-0")}, services
    # An endpoint alone exports metrics only: traces must be asked for.
    assert not sink.spans, sink.spans[:3]
    c.close()


def test_an_otlp_endpoint_that_is_not_a_url_stops_startup_naming_the_variable(tmp_path):
    binary = require_broker_binary()
    r = subprocess.run(
        [str(binary), "--override", f"log.dirs={tmp_path}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=30,
    )
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318: expected an http:// or https:// URL" in r.stderr, r.stderr


def test_broker_serves_its_metrics_to_prometheus_on_the_http_listener(broker_factory):
    http = free_port()
    b = broker_factory(overrides={"oxbow.http.listener": f"127.0.0.1:{http}"})
    # One broker: a topic asking for 2 in-sync replicas has every partition under its min ISR.
    create_topic(b, "scraped", 3)
    create_topic(b, "strict", 2, config={"min.insync.replicas": "2"})
    create_topic(b, "lagging", 1, config={"flush.messages": "1"})  # every append is flushed
    # Idempotent: one producer id, with state in each partition it writes to.
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(500):
        p.produce("scraped", value=b"y" * 100, partition=i % 3)
        p.produce("lagging", value=b"z" * 10)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "scraper", "auto.offset.reset": "earliest"})
    assert consume(c, "scraped", 500) == 500
    c.close()  # commits where it stopped: the end of each partition
    # A group that reads 200 of lagging's 500 records and commits there: its lag is 300.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "laggard", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    assert consume(c, "lagging", 200) == 200
    c.commit(asynchronous=False)
    c.close()

    url = f"http://127.0.0.1:{http}/metrics"
    lag_scraped, lag_lagging = 'oxbow_consumer_group_lag{group="scraper",topic="scraped"}', \
        'oxbow_consumer_group_lag{group="laggard",topic="lagging"}'
    # Lag is computed in rounds (every 10 s) while the metrics are read: the first read starts them.
    deadline = time.monotonic() + 60
    while True:
        types, helps, s = scrape(url)
        if s.get(lag_scraped) == 0 and s.get(lag_lagging) == 300:
            break
        assert time.monotonic() < deadline, {k: v for k, v in s.items() if "group" in k}
        time.sleep(1)
    # Names as the OpenTelemetry Collector's Prometheus exporter writes the OTLP ones.
    assert types == {
        "oxbow_broker_requests_total": "counter",
        "oxbow_broker_produced_records_total": "counter",
        "oxbow_broker_produced_bytes_total": "counter",
        "oxbow_broker_fetched_bytes_total": "counter",
        "oxbow_broker_connections": "gauge",
        "oxbow_broker_purgatory_size": "gauge",
        "oxbow_broker_fetch_sessions": "gauge",
        "oxbow_broker_partitions": "gauge",
        "oxbow_broker_partitions_under_replicated": "gauge",
        "oxbow_broker_partitions_under_min_isr": "gauge",
        "oxbow_broker_isr_expands_total": "counter",
        "oxbow_broker_isr_shrinks_total": "counter",
        "oxbow_broker_producer_ids": "gauge",
        "oxbow_broker_log_size_bytes": "gauge",
        "oxbow_topic_produced_records_total": "counter",
        "oxbow_topic_produced_bytes_total": "counter",
        "oxbow_topic_fetched_bytes_total": "counter",
        "oxbow_topic_log_size_bytes": "gauge",
        "oxbow_controller_active": "gauge",
        "oxbow_controller_partitions_offline": "gauge",
        "oxbow_consumer_group_lag": "gauge",
        "oxbow_coordinator_groups": "gauge",
        "oxbow_coordinator_rebalances_total": "counter",
        "oxbow_coordinator_rebalance_time_milliseconds_total": "counter",
        "oxbow_quorum_term": "gauge",
        "oxbow_quorum_commits_total": "counter",
        "oxbow_quorum_commit_time_milliseconds_total": "counter",
        "oxbow_quorum_follower_lag": "gauge",
        "oxbow_log_flushes_total": "counter",
        "oxbow_log_flush_time_milliseconds_total": "counter",
        "oxbow_broker_request_duration_seconds": "histogram",
    }, types
    assert set(helps) == set(types) and all(helps.values())
    assert s["oxbow_broker_produced_records_total"] == 500 + 500
    produced = s["oxbow_broker_produced_bytes_total"]
    assert produced > 500 * 100 + 500 * 10, produced
    # scraper read every record of scraped (laggard read part of lagging's).
    assert s["oxbow_broker_fetched_bytes_total"] >= 500 * 100
    assert s['oxbow_broker_requests_total{api="Produce"}'] >= 1
    assert s['oxbow_broker_requests_total{api="Fetch"}'] >= 1
    assert s['oxbow_broker_requests_total{api="JoinGroup"}'] >= 1
    # Every produce request was answered: the histogram counted each once, its buckets cumulative.
    hist = "oxbow_broker_request_duration_seconds"
    count = s[f'{hist}_count{{api="Produce"}}']
    assert count == s['oxbow_broker_requests_total{api="Produce"}'], count
    buckets = [v for k, v in s.items() if k.startswith(f'{hist}_bucket{{api="Produce",')]
    assert len(buckets) == 15 and buckets == sorted(buckets) and buckets[-1] == count, buckets
    assert s[f'{hist}_bucket{{api="Produce",le="+Inf"}}'] == count
    assert 0 < s[f'{hist}_sum{{api="Produce"}}'] < count * 10
    # scraped's 3, strict's 2, lagging's 1 and __consumer_offsets' 50, all led here.
    assert s['oxbow_broker_partitions{role="leader"}'] == 3 + 2 + 1 + 50
    assert s['oxbow_broker_partitions{role="follower"}'] == 0
    assert s["oxbow_broker_partitions_under_replicated"] == 0
    assert s["oxbow_broker_partitions_under_min_isr"] == 2
    # One broker: no ISR ever changes (test_replication.py counts expands on three nodes).
    assert s["oxbow_broker_isr_expands_total"] == s["oxbow_broker_isr_shrinks_total"] == 0
    # The producer's state in scraped's 3 partitions and lagging's 1.
    assert s["oxbow_broker_producer_ids"] == 3 + 1
    assert s["oxbow_broker_connections"] >= 1  # the producer's
    assert s["oxbow_broker_log_size_bytes"] >= produced
    # Per topic: records and bytes in add up to the broker's; nothing was appended to strict.
    topics = ("scraped", "lagging")
    assert [s[f'oxbow_topic_produced_records_total{{topic="{t}"}}'] for t in topics] == [500, 500]
    assert sum(s[f'oxbow_topic_produced_bytes_total{{topic="{t}"}}'] for t in topics) == produced
    assert s['oxbow_topic_fetched_bytes_total{topic="scraped"}'] >= 500 * 100
    assert s.get('oxbow_topic_produced_records_total{topic="strict"}', 0) == 0
    # A fresh topic's log holds exactly the batches appended to it.
    for t in topics:
        assert s[f'oxbow_topic_log_size_bytes{{topic="{t}"}}'] == s[f'oxbow_topic_produced_bytes_total{{topic="{t}"}}']
    assert s["oxbow_controller_active"] == 1
    assert s["oxbow_controller_partitions_offline"] == 0
    assert s["oxbow_quorum_term"] >= 1
    # Both groups are empty now (their consumers closed), and only they have offsets.
    assert s['oxbow_coordinator_groups{type="classic",state="Empty"}'] == 2, s
    assert sorted(k for k in s if k.startswith("oxbow_consumer_group_lag")) == sorted([lag_lagging, lag_scraped])
    # scraper's and laggard's consumers each joined a classic group that became Stable.
    assert s['oxbow_coordinator_rebalances_total{type="classic"}'] >= 2
    assert s['oxbow_coordinator_rebalances_total{type="consumer"}'] == 0
    assert s['oxbow_coordinator_rebalance_time_milliseconds_total{type="classic"}'] >= 0
    # The single node is the active controller: it committed (at least) its registration and
    # the three topics; it has no other voter to lag. lagging's appends were each flushed.
    assert s["oxbow_quorum_commits_total"] >= 4
    assert s["oxbow_quorum_commit_time_milliseconds_total"] >= 0
    assert not [k for k in s if k.startswith("oxbow_quorum_follower_lag")]
    assert 1 <= s["oxbow_log_flushes_total"] <= 500 + 500
    assert s["oxbow_log_flush_time_milliseconds_total"] >= 0
    # Nothing waits once the clients are done; a consumer's fetch at the log end then waits
    # (fetch.wait.max.ms) in the fetch purgatory.
    purgatory = 'oxbow_broker_purgatory_size{{purgatory="{}"}}'
    assert (s[purgatory.format("produce")], s[purgatory.format("fetch")]) == (0, 0)
    waiter = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "waiter", "fetch.wait.max.ms": 5000})
    waiter.assign([TopicPartition("lagging", 0, OFFSET_END)])
    try:
        wait_for("a fetch waiting for data", lambda: waiter.poll(0.2) is None
                 and scrape(url)[2][purgatory.format("fetch")] >= 1)
        assert scrape(url)[2][purgatory.format("produce")] == 0
    finally:
        waiter.close()


def traceparent(trace_id: str, span_id: str, sampled: bool) -> str:
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def spans_of(sink, **match):
    with sink.lock:
        return [s for s in sink.spans if all(s.get(k) == v for k, v in match.items())]


SERVER, INTERNAL, ERROR = 2, 1, 2  # OTLP's SPAN_KIND_SERVER, SPAN_KIND_INTERNAL, STATUS_CODE_ERROR


def test_a_produce_continues_the_trace_its_records_carry_with_its_replication_wait(tmp_path, monkeypatch, sink):
    """Three nodes, a topic of 3 replicas. W3C trace context in record headers (as
    OpenTelemetry's Kafka instrumentation writes it) makes the leader's Produce span a child of
    the first sampled record's span, linked to the other sampled records' spans, with the
    record's tracestate, and an acks=all produce has a replication wait span inside it; a
    request whose records' parents were not sampled is not traced, nor is any request outside a
    trace under parentbased_always_off, on any node. Compressed batches are read too."""
    for k, v in traces_only(sink, "parentbased_always_off").items():
        monkeypatch.setenv(k, v)
    cluster = Cluster(require_broker_binary(), tmp_path / "cluster", 3, 0)
    try:
        cluster.start()
        bootstrap = cluster.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("traced", 1, 3, config={"min.insync.replicas": "2"})])["traced"].result(timeout=30)
        a, c, d, e, f = ("%032x" % (0xA0 + i) for i in range(5))
        unsampled = "%032x" % 0xB0
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "acks": "all"})
        p.produce("traced", value=b"a", headers=[("traceparent", traceparent(a, "00000000000000a1", True))])
        assert p.flush(30) == 0
        p.produce("traced", value=b"u", headers=[("traceparent", traceparent(unsampled, "00000000000000b1", False))])
        assert p.flush(30) == 0
        # Two records from two traces in one request: the first is the parent, the second a link.
        p.produce("traced", value=b"c", headers=[("traceparent", traceparent(c, "00000000000000c1", True)),
                                                  ("tracestate", "vendor=1")])
        p.produce("traced", value=b"d", headers=[("traceparent", traceparent(d, "00000000000000d1", True))])
        assert p.flush(30) == 0
        # An unsampled record first, a sampled one second: the sampled one is the parent.
        p.produce("traced", value=b"u2", headers=[("traceparent", traceparent(unsampled, "00000000000000b2", False))])
        p.produce("traced", value=b"f", headers=[("traceparent", traceparent(f, "00000000000000f1", True))])
        assert p.flush(30) == 0
        z = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd", "acks": "1"})
        z.produce("traced", value=b"e" * 100, headers=[("traceparent", traceparent(e, "00000000000000e1", True))])
        assert z.flush(30) == 0

        wait_for("the compressed batch's Produce span", lambda: spans_of(sink, trace_id=e))
        time.sleep(1)  # anything else still queued in the broker's span batch
        produce_a = spans_of(sink, trace_id=a, name="Produce")
        assert len(produce_a) == 1, spans_of(sink, trace_id=a)
        produce_a = produce_a[0]
        assert produce_a["parent_span_id"] == "00000000000000a1"
        assert produce_a["kind"] == SERVER
        attrs = produce_a["attributes"]
        assert attrs["rpc.system"] == "kafka" and attrs["rpc.method"] == "Produce", attrs
        assert attrs["messaging.batch.message_count"] == 1 and attrs["kafka.acks"] == -1, attrs
        assert attrs["network.peer.address"].startswith("127.") and attrs["oxbow.principal"] == "User:ANONYMOUS", attrs
        wait = spans_of(sink, trace_id=a, name="replication wait")
        assert len(wait) == 1 and wait[0]["parent_span_id"] == produce_a["span_id"], wait
        assert wait[0]["kind"] == INTERNAL and wait[0]["attributes"]["oxbow.partitions"] == 1, wait

        produce_c = spans_of(sink, trace_id=c, name="Produce")
        assert len(produce_c) == 1 and produce_c[0]["parent_span_id"] == "00000000000000c1", produce_c
        assert produce_c[0]["links"] == [(d, "00000000000000d1")], produce_c
        assert produce_c[0]["attributes"]["messaging.batch.message_count"] == 2, produce_c
        assert produce_c[0]["trace_state"] == "vendor=1", produce_c  # the record's tracestate goes on

        produce_f = spans_of(sink, trace_id=f, name="Produce")
        assert len(produce_f) == 1 and produce_f[0]["parent_span_id"] == "00000000000000f1", produce_f
        assert produce_f[0]["links"] == [] and produce_f[0]["attributes"]["messaging.batch.message_count"] == 2

        produce_e = spans_of(sink, trace_id=e)
        assert [s["name"] for s in produce_e] == ["Produce"], produce_e  # acks=1: no replication wait
        assert produce_e[0]["parent_span_id"] == "00000000000000e1"

        # Nothing else was traced: not the unsampled trace, not Metadata or ApiVersions.
        with sink.lock:
            traced = {s["trace_id"] for s in sink.spans}
        assert traced == {a, c, e, f}, traced
    finally:
        cluster.close()


def test_every_request_is_a_span_with_its_api_client_and_peer_when_always_sampled(broker_factory, sink):
    b = broker_factory(start=False)
    b.env = traces_only(sink, "always_on")
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "span-checker"})
    admin.list_topics(timeout=10)
    wait_for("a Metadata span from span-checker",
             lambda: any(s["attributes"].get("messaging.client.id") == "span-checker"
                         for s in spans_of(sink, name="Metadata")))
    with sink.lock:
        mine = [s for s in sink.spans if s["attributes"].get("messaging.client.id") == "span-checker"]
    names = {s["name"] for s in mine}
    assert {"ApiVersions", "Metadata"} <= names, names
    for s in mine:
        assert s["kind"] == SERVER and s["parent_span_id"] == "" and s["service"] == "oxbow-broker", s
        assert s["attributes"]["rpc.method"] == s["name"], s
        assert s["attributes"]["kafka.api.version"] >= 0 and s["attributes"]["oxbow.listener"], s


def test_a_trace_setting_the_broker_cannot_use_stops_startup_naming_the_variable(tmp_path):
    binary = require_broker_binary()
    for extra, message in [
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER=sometimes: expected always_on"),
        # Checked with no endpoint too (blank is unset).
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " ", "OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER=sometimes"),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
         "OTEL_TRACES_SAMPLER_ARG=2: expected a sampling ratio from 0 to 1"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER=zipkin: expected otlp or none"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER_ARG": "0.5%"}, "OTEL_TRACES_SAMPLER_ARG=0.5%: expected"),
    ]:
        r = subprocess.run(
            [str(binary), "--override", f"log.dirs={tmp_path}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "PATH": "/usr/bin:/bin", **extra},
            capture_output=True, text=True, timeout=30,
        )
        assert r.returncode == 2, (extra, r.returncode, r.stderr)
        assert message in r.stderr, r.stderr
