"""The broker's OpenTelemetry metrics: exported over OTLP/HTTP to a stand-in collector that
decodes them with the official OTLP protobufs (tests/k8s/otlp_sink.py), with figures that
match what real clients did. Bad endpoint settings stop startup naming the variable."""

import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from oxbow_harness import free_port, require_broker_binary

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))
from otlp_sink import Sink  # noqa: E402


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


def test_broker_exports_request_traffic_and_partition_metrics_over_otlp(broker_factory):
    port = free_port()
    sink = Sink("127.0.0.1", port)
    try:
        b = broker_factory(start=False)
        b.env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_METRIC_EXPORT_INTERVAL": "500",
                 "OTEL_RESOURCE_ATTRIBUTES": "k8s.pod.name=events-broker-0"}
        b.start()
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        for i in range(1000):
            p.produce("metered", value=b"x" * 100, partition=i % 4)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "metered", "auto.offset.reset": "earliest"})
        c.subscribe(["metered"])
        got = 0
        deadline = time.monotonic() + 30
        while got < 1000 and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and not m.error():
                got += 1
        assert got == 1000

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
        assert latest(sink, "oxbow.broker.partitions.under_replicated") == 0
        wait_for("two client connections open", lambda: (latest(sink, "oxbow.broker.connections") or 0) >= 2)
        assert (latest(sink, "oxbow.broker.log.size") or 0) >= produced
        assert latest(sink, "oxbow.controller.active") == 1
        with sink.lock:
            services = {(a.get("resource.service.name"), a.get("resource.service.instance.id"),
                         a.get("resource.k8s.pod.name")) for n, a, _ in sink.points if n.startswith("oxbow.")}
        assert services == {("oxbow-broker", "1", "events-broker-0")}, services
        c.close()
    finally:
        sink.close()


def test_an_otlp_endpoint_that_is_not_a_url_stops_startup_naming_the_variable(tmp_path):
    binary = require_broker_binary()
    r = subprocess.run(
        [str(binary), "--override", f"log.dirs={tmp_path}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=30,
    )
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318: expected an http:// or https:// URL" in r.stderr, r.stderr
