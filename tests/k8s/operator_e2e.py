#!/usr/bin/env python3
"""End-to-end test of the operator and its Helm chart on the test cluster (tests/k8s/up), with
the images tests/k8s/load-images built.

  - `helm lint`, and the rendered chart validated by the real API server (server-side dry run);
  - `helm install`: the operator runs;
  - bad Clusters are refused by `kubectl apply` with the schema's message;
  - a Cluster of 3 brokers (all three controllers: the metadata quorum) becomes Ready with its
    quorum (voters, leader) in the status; kcat (a real client, inside the cluster) reads its
    metadata through the bootstrap Service and the brokers' stable DNS names, writes and reads
    records;
  - a static config change restarts each broker exactly once, one at a time, each Ready before
    the next, the active controller last (clean shutdowns, config applied, records intact), with
    an Event per restart saying why; a dynamic one (log.retention.ms) is applied to the running
    brokers, seen by kafka-topics, with no restart;
  - with Kafka's Java producer (idempotent, acks=all) and a kcat consumer running throughout
    on a replication factor 3 topic: `kubectl scale` 3 -> 5 spreads existing replicas onto
    the new brokers (throttled; Rebalancing condition and printer column; replicas per broker
    within one; throttles cleared, as kafka-configs shows), 5 -> 3 drains brokers 3 and 4
    first (the operator pod deleted mid-drain: the new one resumes from the metadata), then
    removes them, unregisters them and deletes their claims; a scale-down to 2 with RF 3
    topics is refused (ScaleDownBlocked, CannotDrain); acknowledged / lost / duplicated of the
    load are printed (lost 0, duplicated 0);
  - `controllers.replicas` 3 -> 1 -> 3: voters removed (the active controller last) and added
    one at a time, an Event each, topics created under each quorum, no broker restarted and
    server.properties unchanged;
  - Topics, checked with Kafka's own kafka-topics (TopicCommand): created with configs, grown,
    configs changed and removed, a shrink refused with a readable condition, an existing topic
    adopted, a missing Cluster reported, deletion policies `delete` and `retain`;
  - a secured Cluster beside it (tests/k8s/security_e2e.py): listeners with TLS, SCRAM and
    client certificates, replication and the quorum on TLS, `User` resources granting one topic
    and not another, deletion revoking, a CA renewal served by every broker without a restart;
  - production defaults (tests/k8s/restricted_e2e.py): a Cluster in a namespace enforcing
    PodSecurity `restricted`, on volumes that honour fsGroup, created with no config: Ready and
    serving, RF 3 / min.insync.replicas 2, a roll under an acks=all load with nothing lost and
    no partition unavailable, an unpullable image and a refused storage change shown on
    `Ready=False` with Warning events, and recovery;
  - `helm upgrade` restarts the operator but no broker; with two replicas one holds the Lease
    and the other takes over (and reconciles) when the leader stops;
  - the operator's traces (a span per reconcile) and metrics (reconcile counters by controller
    and result) arrive over OTLP/HTTP at a stand-in collector (otlp_sink.py), and so do every
    broker's metrics (spec.telemetry: requests, partitions led, the active controller) and
    request spans (traceSampleRatio), each labelled with its pod;
  - deleting the namespace (a Cluster, a Topic with its finalizer) leaves nothing stuck;
    `helm uninstall` removes the operator and keeps the CRDs.
Exits non-zero with the reason on the first failure.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from kubetest import REFUSALS, LoadProducer, Suite
from otlp_sink import Sink
from restricted_e2e import run_restricted
from security_e2e import run_security

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from bench import java_classpath  # noqa: E402  (Kafka's tools jars, as the benchmark uses them)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "charts", "oxbow")
NS = "oxbow-e2e"
OP_NS = "oxbow-system"
NODE_IP = "172.30.0.1"  # tests/k8s/lib.sh: the node's address, reachable from pods
HELM_SET = [
    "--set", f"otlpEndpoint=http://{NODE_IP}:4318",
    "--set", "image.repository=localhost/oxbow/oxbow-operator",
    "--set", "image.tag=dev",
    "--set", "brokerImage=localhost/oxbow/oxbow-broker:dev",
    # The test cluster's kubelet syncs every 10 s (tests/k8s/up), not every minute: a Secret
    # reaches the pods within 30 s. Rolls wait 10 s between restarts rather than 30: a client
    # may then meet a stale DNS answer for a restarted broker and retry, which the rolls under
    # load allow for (they count lost records, not stalls). The defaults add about 8 minutes.
    "--set", "restartSettleSeconds=10",
    "--set", "secretPropagationSeconds=30",
]


T = Suite("operator-e2e", [NS], extra_dumps=[["logs", "-n", OP_NS, "deploy/oxbow-operator", "--tail=40"]])
run, kubectl, kjson, step, fail, wait = T.run, T.kubectl, T.kjson, T.step, T.fail, T.wait


def condition(obj, type_):
    for c in (obj.get("status") or {}).get("conditions", []):
        if c["type"] == type_:
            return c
    return {}


def cluster_ready(name):
    def check():
        c = kjson("get", "cluster", "-n", NS, name)
        gen = c["metadata"]["generation"]
        ready = condition(c, "Ready")
        return c if ready.get("status") == "True" and c["status"].get("observedGeneration") == gen else None

    return check


BROKERS = 3


def cluster_yaml(config=None, replicas=BROKERS, controllers=BROKERS, otlp=f"http://{NODE_IP}:4318",
                 rack="topology.kubernetes.io/zone"):
    """A Cluster manifest (JSON, which kubectl reads as YAML): `replicas` brokers, the first
    `controllers` of them the metadata quorum's voters, exporting metrics to `otlp` (the
    stand-in collector) every 5 s and 5% of their requests as spans, racks from the node label `rack` (tests/k8s/up labels the
    node zone-a, region-1)."""
    return json.dumps({
        "apiVersion": "oxbow.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "events", "namespace": NS},
        "spec": {"replicas": replicas, "controllers": {"replicas": controllers}, "storage": {"size": "1Gi"},
                 "config": config or {},
                 "telemetry": {"otlpEndpoint": otlp, "exportIntervalSeconds": 5, "traceSampleRatio": 0.05},
                 "rack": {"topologyKey": rack}},
    })


def broker_pods():
    """name -> pod, for the Cluster's broker pods."""
    return {p["metadata"]["name"]: p for p in
            kjson("get", "pods", "-n", NS, "-l", "app.kubernetes.io/instance=events")["items"]}


def pod_uids():
    return {n: p["metadata"]["uid"] for n, p in broker_pods().items()}


def ready_since(pod):
    """When the pod last became Ready (its condition's transition time), or None."""
    for c in (pod.get("status") or {}).get("conditions", []):
        if c["type"] == "Ready" and c["status"] == "True":
            return c["lastTransitionTime"]
    return None


def restart_events():
    """(time, pod, note) of every RestartingBroker event, oldest first."""
    out = []
    for e in kjson("get", "events", "-n", NS)["items"]:
        if e.get("reason") != "RestartingBroker":
            continue
        note = e.get("note") or e.get("message", "")
        when = e.get("eventTime") or e.get("lastTimestamp") or e["metadata"]["creationTimestamp"]
        pods = [n for n in (f"events-broker-{i}" for i in range(BROKERS + 1)) if f"deleting {n}:" in note]
        out.append((when, pods[0] if pods else note, note))
    return sorted(out)


def quorum_events(reason):
    """Broker ids of the Cluster's VoterAdded or VoterRemoved events, oldest first."""
    out = []
    for e in kjson("get", "events", "-n", NS)["items"]:
        if e.get("reason") == reason:
            note = e.get("note") or e.get("message", "")
            when = e.get("eventTime") or e.get("lastTimestamp") or e["metadata"]["creationTimestamp"]
            out.append((when, int(note.split()[1])))
    return [i for _, i in sorted(out)]


HOSTS = tempfile.NamedTemporaryFile("w", prefix="oxbow-e2e-hosts", delete=False).name


def refresh_hosts():
    """Maps each broker's cluster DNS name to its pod IP, and the bootstrap Service's to its
    ClusterIP, for the JVMs on the host; returns the bootstrap address."""
    return T.broker_hosts(NS, "events", HOSTS)


def kafka_tool(main_class, *args, check=True):
    """One of Kafka's own tools (its jars, unchanged) from the host, with the brokers' DNS names
    resolved through the hosts file."""
    return run("java", f"-Djdk.net.hosts.file={HOSTS}", "-Dlog4j.configuration=file:/dev/null", "-cp",
               java_classpath(), main_class, "--bootstrap-server", refresh_hosts(), *args, check=check).stdout


def kafka_topics(*args, check=True):
    """Kafka's own kafka-topics.sh (TopicCommand) from the host. Brokers advertise cluster DNS
    names; the JVM resolves them through a hosts file that maps each to its pod IP."""
    return kafka_tool("org.apache.kafka.tools.TopicCommand", *args, check=check)


def describe(topic):
    """(topic id, partition count, replication factor, configs) from kafka-topics --describe."""
    for line in kafka_topics("--describe", "--topic", topic).splitlines():
        if line.startswith(f"Topic: {topic}\t"):
            f = dict(part.split(": ", 1) for part in line.split("\t") if ": " in part)
            configs = dict(c.split("=", 1) for c in f.get("Configs", "").split(",") if "=" in c)
            return f["TopicId"], int(f["PartitionCount"]), int(f["ReplicationFactor"]), configs
    fail(f"kafka-topics --describe {topic} printed no topic line")


def topic_yaml(name, partitions, config=None, cluster="events", annotations=None, replication_factor=None):
    spec = {"cluster": cluster, "partitions": partitions, "config": config or {}}
    if replication_factor is not None:
        spec["replicationFactor"] = replication_factor
    return json.dumps({
        "apiVersion": "oxbow.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
        "spec": spec,
    })


def in_sync(topic):
    """partition -> (replicas, ISR) from kcat's metadata."""
    md = json.loads(kcat("-L", "-J", "-t", topic))
    t = next(t for t in md["topics"] if t["topic"] == topic)
    return {p["partition"]: (sorted(r["id"] for r in p["replicas"]), sorted(r["id"] for r in p["isrs"]))
            for p in t["partitions"]}


def topic_state(name, ready=True, reason=None):
    def check():
        t = kjson("get", "topic", "-n", NS, name)
        c = condition(t, "Ready")
        if (t.get("status") or {}).get("observedGeneration") != t["metadata"]["generation"]:
            return None
        if c.get("status") == ("True" if ready else "False") and (reason is None or c.get("reason") == reason):
            return t
        return None

    return check


def kcat(*args, input=None):
    """kcat in the client pod. A broker name that does not resolve is retried for up to 45 s:
    while a restarted broker's pod was replaced its name had no answer, and cluster DNS caches
    that NXDOMAIN for up to 30 s (CoreDNS `cache 30`); kcat -e gives up at once where a
    long-running client would resolve again. Only reads are retried (a produce retried could
    write twice); any other failure fails at once."""
    cmd = ["kubectl", "exec", "-i", "-n", NS, "client", "--", "kcat", "-b", "events-bootstrap:9092", *args]
    deadline = time.monotonic() + 45
    while True:
        p = run(*cmd, input=input, check=False)
        if p.returncode == 0:
            return p.stdout
        if input is not None or "Host resolution failure" not in p.stderr or time.monotonic() > deadline:
            fail(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        time.sleep(2)


class Load:
    """Kafka's Java producer (idempotent, acks=all; kubetest.LoadProducer) on the host and a kcat
    consumer inside the cluster, both running through the scaling steps, on `load` (6 partitions,
    replication factor 3, min.insync.replicas 2) after 60 MB of prefill, so that throttled moves
    take a while. 500 records a second; keys are the producer's values (the prefill has none)."""

    def __init__(self):
        kubectl("apply", "-f", "-", input=topic_yaml("load", 6, {"min.insync.replicas": "2"}, replication_factor=3))
        wait("Topic load Ready", topic_state("load"), 120)
        self.bootstrap = refresh_hosts()
        run("java", f"-Djdk.net.hosts.file={HOSTS}", "-Dlog4j.configuration=file:/dev/null", "-cp", java_classpath(),
            "org.apache.kafka.tools.ProducerPerformance", "--topic", "load", "--num-records", "6000",
            "--record-size", "10000", "--throughput", "-1", "--producer-props", f"bootstrap.servers={self.bootstrap}",
            "acks=all")
        self.producer = LoadProducer(T, java_classpath(), HOSTS, self.bootstrap, "load", "j", 500)
        self.consumed = open(os.path.join(self.producer.dir, "consumed"), "w+")
        self.consumer = subprocess.Popen(
            ["kubectl", "exec", "-n", NS, "client", "--", "kcat", "-b", "events-bootstrap:9092", "-C", "-t", "load",
             "-o", "beginning", "-u", "-q", "-f", "%k\n"], stdout=self.consumed, stderr=subprocess.DEVNULL)
        # New broker pods get names the JVM must resolve: keep the hosts file current.
        self.stop = threading.Event()
        self.refresher = threading.Thread(target=self._refresh, daemon=True)
        self.refresher.start()
        step(f"load running: Java producer (bootstrap {self.bootstrap}), kcat consumer in the client pod")

    def _refresh(self):
        while not self.stop.wait(2):
            try:
                refresh_hosts()
            except (SystemExit, Exception):  # noqa: BLE001 - the next round retries
                pass

    def consumed_keys(self):
        with open(self.consumed.name) as f:
            return [k for k in f.read().split() if k.startswith("j")]

    def finish(self):
        step("load: stopping the producer; the consumer that ran throughout and a fresh read must hold every "
             "acknowledged record")
        summary, acked = self.producer.finish(lambda: T.broker_log_lines(NS, "events", REFUSALS))
        wait("the consumer that ran throughout to read every acknowledged record",
             lambda: acked <= set(self.consumed_keys()), 180)
        self.consumer.terminate()
        self.stop.set()
        throughout = self.consumed_keys()
        final = [k for k in kcat("-C", "-t", "load", "-o", "beginning", "-e", "-q", "-f", "%k\n").split()
                 if k.startswith("j")]
        lost = acked - set(final)
        dup = len(final) - len(set(final))
        step(f"load: acknowledged {len(acked)} / lost {len(lost)} / duplicated {dup} (fresh read); the consumer "
             f"that ran throughout read {len(set(throughout))} distinct; producer's longest stall "
             f"{summary['longest_stall_ms']} ms")
        if lost or dup:
            fail(f"lost {sorted(lost)[:10]}, {dup} duplicated")


def placement():
    """(replicas per broker, leaders per broker, partition -> replicas) over every topic."""
    md = json.loads(kcat("-L", "-J"))
    replicas, leaders, where = {}, {}, {}
    for t in md["topics"]:
        for p in t["partitions"]:
            ids = [r["id"] for r in p["replicas"]]
            where[(t["topic"], p["partition"])] = (ids, sorted(r["id"] for r in p["isrs"]))
            for i in ids:
                replicas[i] = replicas.get(i, 0) + 1
            leaders[p["leader"]] = leaders.get(p["leader"], 0) + 1
    return dict(sorted(replicas.items())), dict(sorted(leaders.items())), where


def rebalance_status():
    c = kjson("get", "cluster", "-n", NS, "events")
    return c, (c.get("status") or {}).get("rebalance") or {}


def spread_and_drain(load, brokers_are):
    """kubectl scale 3 -> 5 (replicas spread onto the new brokers) and 5 -> 3 (drained first,
    the operator pod deleted mid-drain, then removed, unregistered, their claims deleted)."""
    step("kubectl scale 3 -> 5: existing partitions spread onto brokers 3 and 4, throttled")
    kubectl("patch", "cluster/events", "-n", NS, "--type=merge", "-p",
            json.dumps({"spec": {"rebalance": {"throttleBytesPerSecond": 1000000, "maxConcurrentMoves": 5}}}))
    before = placement()
    step(f"before: replicas per broker {before[0]}, leaders per broker {before[1]}")
    kubectl("scale", "cluster/events", "-n", NS, "--replicas=5")
    wait("5 brokers Ready", lambda: rebalance_status()[0]["status"].get("readyBrokers") == 5, 300)
    wait("kcat metadata: brokers 0..4", brokers_are(5), 90)
    seen = {"rebalancing": set(), "column": set()}

    def balanced():
        c, r = rebalance_status()
        if condition(c, "Rebalancing").get("status") == "True":
            seen["rebalancing"].add(condition(c, "Rebalancing")["message"].split(",")[0])
        if r.get("progress"):
            seen["column"].add(r["progress"])
        # Balanced after this spread was seen under way (an earlier status may say Balanced).
        return r if seen["rebalancing"] and r.get("phase") == "Balanced" \
            and condition(c, "Rebalancing").get("status") == "False" else None

    r = wait("the spread to finish (status.rebalance Balanced)", balanced, 900)
    replicas, leaders, where = placement()
    step(f"after: replicas per broker {replicas}, leaders per broker {leaders}; {r['planned']} moves; "
         f"Rebalancing seen: {sorted(seen['rebalancing'])[:4]}; printer column seen: {sorted(seen['column'])[:6]}")
    if not seen["rebalancing"]:
        fail("the Rebalancing condition was never True during the spread")
    if set(replicas) != set(range(5)) or max(replicas.values()) - min(replicas.values()) > 1:
        fail(f"replicas per broker after the spread: {replicas}")
    on_new = {b for (t, _), (ids, _) in where.items() if t == "load" for b in ids} & {3, 4}
    if on_new != {3, 4}:
        fail(f"no replica of load on broker(s) {sorted({3, 4} - on_new)}")
    if r.get("throttledTopics"):
        fail(f"throttled topics left after the spread: {r}")
    for b in (3, 4):
        got = kafka_tool("kafka.admin.ConfigCommand", "--describe", "--entity-type", "brokers", "--entity-name", str(b))
        if "throttled.rate" in got:
            fail(f"broker {b} still has a replication throttle after the spread:\n{got}")
    got = kafka_tool("kafka.admin.ConfigCommand", "--describe", "--entity-type", "topics", "--entity-name", "load")
    if "throttled.replicas" in got:
        fail(f"topic load still has throttled replicas after the spread:\n{got}")
    wait("every replica in sync after the spread", lambda: all(
        sorted(ids) == isr for ids, isr in placement()[2].values()), 120)

    step("kubectl scale 5 -> 3: brokers 3 and 4 drained first (the operator pod deleted mid-drain), then removed, "
         "unregistered, their claims deleted (storage.deleteClaim)")
    kubectl("patch", "cluster/events", "-n", NS, "--type=merge", "-p",
            json.dumps({"spec": {"storage": {"deleteClaim": True}}}))
    operators = {p["metadata"]["uid"] for p in kjson("get", "pods", "-n", OP_NS)["items"]}
    kubectl("scale", "cluster/events", "-n", NS, "--replicas=3")
    r = wait("the drain to be under way", lambda: (r := rebalance_status()[1]).get("phase") == "Draining"
             and r.get("inFlight", 0) > 0 and r, 300)
    if {"events-broker-3", "events-broker-4"} - set(broker_pods()):
        fail("a departing broker was removed before its replicas moved away")
    kubectl("delete", "pod", "-n", OP_NS, "-l", "app.kubernetes.io/name=oxbow-operator", "--wait=false")
    step(f"operator pod deleted mid-drain at {r['progress']} ({r.get('inFlight')} in flight, "
         f"{r.get('bytesLeft')} bytes left)")
    wait("a new operator pod", lambda: any(p["metadata"]["uid"] not in operators and p["status"].get("phase")
                                           == "Running" for p in kjson("get", "pods", "-n", OP_NS)["items"]), 120)
    wait("brokers 3 and 4 removed after the drain", lambda: not {"events-broker-3", "events-broker-4"}
         & set(broker_pods()), 900)
    # The pods go before the status says so: the operator scales the StatefulSet down and
    # writes the status at the end of that reconcile (under load, seconds later). Seen in a run
    # beside the host suites: pods 3 and 4 terminating, the status still of the drain, 5 ready.
    def scaled_down():
        c = cluster_ready("events")()
        st = c["status"] if c else {}
        return c if (st.get("readyBrokers") == 3 and st.get("replicas") == 3
                     and st.get("rebalance", {}).get("phase") != "Draining") else None

    c = wait("Cluster events Ready with 3 brokers, its status past the drain", scaled_down, 180)
    if condition(c, "ScaleDownBlocked").get("status") != "False":
        fail(f"after the scale-down: {c['status']}")
    replicas, leaders, where = placement()
    step(f"after the drain: replicas per broker {replicas}, leaders per broker {leaders}; "
         f"status {c['status'].get('rebalance')}")
    if set(replicas) - {0, 1, 2}:
        fail(f"replicas left on departed brokers: {replicas}")

    def registered():
        image = json.loads(kubectl("exec", "-n", NS, "client", "--", "wget", "-qO-",
                                   "http://events-broker-0.events-brokers:8080/metadata"))
        b = image["brokers"]
        return sorted(int(k) for k in b) if isinstance(b, dict) else sorted(x["node_id"] for x in b)

    wait("brokers 3 and 4 unregistered (broker 0's metadata image)", lambda: registered() == [0, 1, 2], 120)
    wait("the departed brokers' claims deleted", lambda: not {"data-events-broker-3", "data-events-broker-4"} & {
        p["metadata"]["name"] for p in kjson("get", "pvc", "-n", NS)["items"]}, 120)
    removed = [e.get("note") or e.get("message", "") for e in kjson("get", "events", "-n", NS)["items"]
               if e.get("reason") == "BrokerRemoved"]
    step(f"registered brokers {registered()}; BrokerRemoved events: {sorted(removed)}")
    wait("every replica in sync after the drain", lambda: all(
        sorted(ids) == isr for ids, isr in placement()[2].values()), 120)


def main():
    step("helm lint and a server-side dry run of the rendered chart")
    run("helm", "lint", CHART)
    if not kubectl("get", "namespace", OP_NS, check=False).strip():
        kubectl("create", "namespace", OP_NS)
    rendered = run("helm", "template", "oxbow", CHART, "-n", OP_NS, *HELM_SET).stdout
    # CRDs first: the dry run of the example resources needs them; this validates every
    # rendered object against the API server's real schemas.
    run("kubectl", "apply", "--dry-run=server", "-f", "-", input=rendered)

    sink = Sink(NODE_IP)

    step("helm install")
    for leftover in (NS,):
        if kubectl("get", "namespace", leftover, check=False).strip():
            kubectl("delete", "namespace", leftover, "--timeout=120s")
    run("helm", "uninstall", "oxbow", "-n", OP_NS, check=False)
    run("helm", "install", "oxbow", CHART, "-n", OP_NS, "--create-namespace", *HELM_SET, "--wait", "--timeout", "180s")
    kubectl("create", "namespace", NS)

    step("bad Clusters are refused by the schema")
    bad = {
        "2 controllers": (cluster_yaml(controllers=2), "controllers.replicas must be 1, 3 or 5"),
        "fewer brokers than controllers": (cluster_yaml(replicas=1), "replicas must be at least controllers.replicas"),
        "a reserved config key": (cluster_yaml({"node.id": "7"}), "the operator sets them"),
        "an OTLP endpoint that is not a URL": (cluster_yaml(otlp="collector:4318"),
                                               "telemetry.otlpEndpoint must be an http:// or https:// URL"),
        "a rack label Kubernetes does not copy onto pods": (cluster_yaml(rack="kubernetes.io/hostname"),
                                                            "rack.topologyKey must be topology.kubernetes.io/zone"),
    }
    for what, (manifest, message) in bad.items():
        p = run("kubectl", "apply", "-f", "-", input=manifest, check=False)
        if p.returncode == 0 or message not in p.stderr:
            fail(f"a Cluster with {what} was not refused with '{message}': rc={p.returncode} {p.stderr}")

    step(f"a Cluster of {BROKERS} brokers (all of them controllers) becomes Ready, with its quorum in the status")
    kubectl("apply", "-f", "-", input=cluster_yaml())
    c = wait("Cluster events Ready", cluster_ready("events"), 300)
    c = wait("the quorum in the status", lambda: (x := kjson("get", "cluster", "-n", NS, "events"))
             and (q := x["status"].get("quorum") or {}).get("leader") is not None and not q.get("stale") and x, 90)
    st = c["status"]
    if st["readyBrokers"] != BROKERS or st["bootstrapServers"] != f"events-bootstrap.{NS}.svc.cluster.local:9092":
        fail(f"status: {st}")
    if st["quorum"]["voters"] != list(range(BROKERS)) or st["quorum"]["leader"] not in range(BROKERS):
        fail(f"quorum status: {st['quorum']}")
    step(f"quorum: voters {st['quorum']['voters']}, leader {st['quorum']['leader']}")
    for i in range(BROKERS):
        pvc = kjson("get", "pvc", "-n", NS, f"data-events-broker-{i}")
        if pvc["status"]["phase"] != "Bound":
            fail(f"claim {i} not bound: {pvc['status']}")

    step("rack awareness: each broker's rack is its node's zone (KEP-4742 pod label)")
    racks = {b["id"]: b.get("rack") for b in st["brokers"]}
    if racks != {i: "zone-a" for i in range(BROKERS)}:
        fail(f"status.brokers racks {racks}, want zone-a for each")
    spread = kjson("get", "statefulset", "-n", NS, "events-broker")["spec"]["template"]["spec"]
    if [c["topologyKey"] for c in spread.get("topologySpreadConstraints", [])] != ["topology.kubernetes.io/zone"]:
        fail(f"broker pods not spread over zones: {spread.get('topologySpreadConstraints')}")

    step("kcat inside the cluster: metadata, produce, consume")
    kubectl("run", "client", "-n", NS, "--image=localhost/oxbow/toolbox:dev", "--restart=Never",
            "--command", "--", "sleep", "100000")
    wait("client pod", lambda: kjson("get", "pod", "-n", NS, "client")["status"].get("phase") == "Running", 90)
    # A namespace recreated with the same names can meet DNS answers cached from the last one
    # (TTL 30 s): wait until the bootstrap name leads to this broker.
    def host(i):
        return f"events-broker-{i}.events-brokers.{NS}.svc.cluster.local:9092"

    def metadata():
        p = run("kubectl", "exec", "-n", NS, "client", "--", "kcat", "-b", "events-bootstrap:9092", "-L", "-J",
                "-m", "5", check=False)
        return json.loads(p.stdout) if p.returncode == 0 else None

    def brokers_are(n):
        def check():
            md = metadata()
            got = sorted((b["id"], b["name"]) for b in (md or {}).get("brokers", []))
            return md if got == [(i, host(i)) for i in range(n)] else None
        return check

    wait(f"kcat metadata through events-bootstrap: brokers 0..{BROKERS - 1}", brokers_are(BROKERS), 90)
    image = json.loads(kubectl("exec", "-n", NS, "client", "--", "wget", "-qO-",
                               "http://events-broker-0.events-brokers:8080/metadata"))
    registered = {int(k): v.get("rack") for k, v in image["brokers"].items()} if isinstance(image["brokers"], dict) \
        else {b["node_id"]: b.get("rack") for b in image["brokers"]}
    if registered != {i: "zone-a" for i in range(BROKERS)}:
        fail(f"brokers registered with racks {registered}, want zone-a for each")
    step(f"registered racks (broker 0's metadata image): {registered}")
    records = "".join(f"record-{i}\n" for i in range(50))
    kcat("-P", "-t", "e2e", "-p", "0", input=records)  # the broker creates the topic on first use
    got = kcat("-C", "-t", "e2e", "-p", "0", "-o", "beginning", "-e", "-q")
    if got != records:
        fail(f"read back {len(got.splitlines())} records, want 50")

    step("a replicated Topic (3 replicas, min.insync.replicas=2) has every replica in sync")
    kubectl("apply", "-f", "-", input=topic_yaml("replicated", 3, {"min.insync.replicas": "2"}, replication_factor=3))
    wait("Topic replicated Ready", topic_state("replicated"), 120)
    wait("every replica of replicated in sync", lambda: all(
        r == [0, 1, 2] and i == r for r, i in in_sync("replicated").values()), 60)
    replicated = "".join(f"replicated-{i}\n" for i in range(300))
    kcat("-P", "-t", "replicated", "-X", "acks=all", input=replicated)

    step("a static config change restarts every broker once, one at a time, the active controller last")
    before = pod_uids()
    leader_before = st["quorum"]["leader"]
    kubectl("apply", "-f", "-", input=cluster_yaml({"num.partitions": "3"}))
    waits_seen = set()

    def rolled():
        msg = condition(kjson("get", "cluster", "-n", NS, "events"), "Restarting").get("message") or ""
        if "cannot restart yet" in msg:
            waits_seen.add(msg.split(": ", 1)[-1][:160])
        return all(pod_uids().get(n) not in (None, u) for n, u in before.items())

    wait("every broker restarted", rolled, 600)
    c = wait("Cluster events Ready after the roll", cluster_ready("events"), 300)
    restarts = restart_events()
    order = [pod for _, pod, _ in restarts]
    step(f"restart order: {order} (active controller before the roll: {leader_before})")
    if sorted(order) != sorted(before):
        fail(f"each broker should restart exactly once; RestartingBroker events: {restarts}")
    # The active controller is restarted only when no other stale controller is left (the event
    # says so). Which broker that is is decided at each step: leadership could move during the
    # roll (restarted voters hold their candidacy until they hear from the leader, bounded).
    if any("active controller" in note for _, _, note in restarts[:-1]):
        fail(f"the active controller was restarted before other controllers: {restarts}")
    pods = broker_pods()
    for (_, pod, _), (next_when, _, _) in zip(restarts, restarts[1:]):
        since = ready_since(pods[pod])
        # Seconds precision on both sides: Ready no later than the next restart began.
        if since is None or since[:19] > next_when[:19]:
            fail(f"{pod} was Ready at {since}, after the next restart at {next_when}")
    cfg = kjson("get", "configmap", "-n", NS, "events-config")["data"]["server.properties"]
    if "num.partitions=3\n" not in cfg:
        fail(f"server.properties: {cfg}")
    for name in pods:
        loaded = [line for line in kubectl("logs", "-n", NS, name).splitlines() if "storage loaded" in line]
        if len(loaded) != 1 or "recovered_partitions=0" not in loaded[0]:
            fail(f"{name} did not start from a clean shutdown: {loaded}")
    got = kcat("-C", "-t", "e2e", "-p", "0", "-o", "beginning", "-e", "-q")
    if got != records:
        fail(f"after the roll read {len(got.splitlines())} records, want 50")
    # The roll waited for replicas to catch up between restarts (the operator's ISR check).
    step(f"waits during the roll: {sorted(waits_seen) or 'none observed'}")
    wait("every replica of replicated back in sync after the roll", lambda: all(
        i == r for r, i in in_sync("replicated").values()), 60)
    got = kcat("-C", "-t", "replicated", "-o", "beginning", "-e", "-q")
    if sorted(got.splitlines()) != sorted(replicated.splitlines()):
        fail(f"after the roll read {len(got.splitlines())} records of replicated, want 300")
    kcat("-P", "-t", "auto3", input="x\n")  # auto-created with the new num.partitions
    parts = {t["topic"]: len(t["partitions"]) for t in json.loads(kcat("-L", "-J"))["topics"]}
    if parts.get("auto3") != 3:
        fail(f"auto-created topic partitions after num.partitions=3: {parts}")
    after_roll = pod_uids()
    time.sleep(5)  # a second, wrong restart would show within a reconcile or two
    if pod_uids() != after_roll:
        fail("a broker restarted a second time")

    step("a dynamic config change applies to the running brokers without a restart")
    kubectl("apply", "-f", "-", input=cluster_yaml({"num.partitions": "3", "log.retention.ms": "3600000"}))
    wait("the ConfigChangedDynamically event", lambda: [
        e for e in kjson("get", "events", "-n", NS)["items"] if e.get("reason") == "ConfigChangedDynamically"
    ], 60)
    c = wait("Cluster events Ready", cluster_ready("events"), 60)
    # kafka-topics shows the topic's effective non-default configs: the new broker default.
    if describe("e2e")[3].get("retention.ms") != "3600000":
        fail(f"topic e2e after the dynamic change: {describe('e2e')}")
    time.sleep(5)
    if pod_uids() != after_roll:
        fail("a dynamic config change restarted a broker")
    if condition(c, "Reconciling").get("status") != "False":
        fail(f"Reconciling after the dynamic change: {condition(c, 'Reconciling')}")

    step("a Topic is created through the Kafka admin protocol, as kafka-topics shows")
    kubectl("apply", "-f", "-", input=topic_yaml("orders", 2, {"retention.ms": "7200000"}))
    t = wait("Topic orders Ready", topic_state("orders"), 120)
    tid, parts, rf, configs = describe("orders")
    # No replicationFactor: the Cluster's default, 3 on a Cluster created with 3 brokers.
    if (tid, parts, rf) != (t["status"]["topicId"], 2, 3) or configs.get("retention.ms") != "7200000" \
            or t["status"].get("replicationFactor") != 3:
        fail(f"kafka-topics: id {tid} partitions {parts} rf {rf} configs {configs}; status {t['status']}")

    step("growing partitions; configs set, changed and removed")
    kubectl("apply", "-f", "-", input=topic_yaml("orders", 4, {"segment.bytes": "1048576"}))
    wait("Topic orders Ready at 4 partitions", topic_state("orders"), 120)
    _, parts, _, configs = describe("orders")
    # kafka-topics lists every non-default value, the broker's own too: with the topic's
    # retention.ms removed, the Cluster's log.retention.ms (3600000, set above) shows through.
    if parts != 4 or configs.get("segment.bytes") != "1048576" or configs.get("retention.ms") != "3600000":
        fail(f"after the change: partitions {parts}, configs {configs}")

    step("a shrink is refused with a readable condition, and nothing changes")
    kubectl("apply", "-f", "-", input=topic_yaml("orders", 3, {"segment.bytes": "1048576"}))
    t = wait("Topic orders to refuse the shrink", topic_state("orders", False, "PartitionDecreaseRefused"), 120)
    msg = condition(t, "Ready")["message"]
    if "cannot remove partitions" not in msg or "4 or more" not in msg:
        fail(f"refusal message: {msg}")
    if describe("orders")[1] != 4:
        fail("the refused shrink changed the partition count")

    step("an existing topic is adopted, not recreated")
    kafka_topics("--create", "--topic", "legacy", "--partitions", "3")
    legacy_id = describe("legacy")[0]
    kubectl("apply", "-f", "-", input=topic_yaml("legacy", 3, annotations={"oxbow.io/deletion-policy": "retain"}))
    t = wait("Topic legacy Ready", topic_state("legacy"), 120)
    if t["status"]["topicId"] != legacy_id:
        fail(f"adopted topic id {t['status']['topicId']}, the topic's is {legacy_id}")

    step("a Topic of a Cluster that does not exist says so")
    kubectl("apply", "-f", "-", input=topic_yaml("orphan", 1, cluster="nope"))
    wait("Topic orphan ClusterNotFound", topic_state("orphan", False, "ClusterNotFound"), 60)
    kubectl("delete", "topic", "-n", NS, "orphan", "--timeout=60s")

    step("deletion policies: delete removes the Kafka topic, retain keeps it")
    kubectl("delete", "topic", "-n", NS, "orders", "legacy", "--timeout=60s")
    listed = kafka_topics("--list").split()
    if "orders" in listed or "legacy" not in listed:
        fail(f"after deleting the Topics, kafka-topics --list shows {listed}")

    load = Load()
    spread_and_drain(load, brokers_are)
    broker_uids = pod_uids()

    step("controllers 3 -> 1 -> 3: voters removed and added one at a time, no broker restarted")

    def voters_are(ids):
        def check():
            x = kjson("get", "cluster", "-n", NS, "events")
            q = (x.get("status") or {}).get("quorum") or {}
            settled = condition(x, "Reconciling").get("reason") != "QuorumChanging"
            return x if q.get("voters") == ids and q.get("leader") in ids and not q.get("stale") and settled else None
        return check

    # The status holds the quorum as the operator last read it from the brokers: right after the
    # drain (its pod deleted and started again) it may not have read it yet, or only kept the
    # last one (`stale`).
    def quorum_leader():
        q = (kjson("get", "cluster", "-n", NS, "events").get("status") or {}).get("quorum") or {}
        return q.get("leader") is not None and not q.get("stale") and q

    leader_before = wait("the quorum in the Cluster's status", quorum_leader, 120)["leader"]
    properties = kjson("get", "configmap", "-n", NS, "events-config")["data"]["server.properties"]
    kubectl("patch", "cluster/events", "-n", NS, "--type=merge", "-p", '{"spec":{"controllers":{"replicas":1}}}')
    wait("voters [0]", voters_are([0]), 300)
    removed = quorum_events("VoterRemoved")
    step(f"voters [0] (leader before: {leader_before}); events: {removed}")
    if sorted(removed) != [1, 2] or (leader_before in (1, 2) and removed[-1] != leader_before):
        fail(f"VoterRemoved events {removed}: want brokers 1 and 2, the active controller {leader_before} last")
    kafka_topics("--create", "--topic", "one-voter", "--partitions", "3")
    if pod_uids() != broker_uids:
        fail("changing controllers.replicas restarted a broker")

    step("a scale-down that cannot keep the replication factor (RF 3 topics, 2 brokers) is refused")
    kubectl("scale", "cluster/events", "-n", NS, "--replicas=2")
    c = wait("ScaleDownBlocked", lambda: (x := kjson("get", "cluster", "-n", NS, "events"))
             and condition(x, "ScaleDownBlocked").get("status") == "True" and x, 120)
    blocked = condition(c, "ScaleDownBlocked")
    if blocked.get("reason") != "CannotDrain" or "replication factor 3 but only 2 broker(s) would remain" \
            not in blocked.get("message", ""):
        fail(f"ScaleDownBlocked: {blocked}")
    step(f"refused: {blocked['message']}")
    time.sleep(10)  # a wrong drain or shrink would start within two reconciles
    if pod_uids() != broker_uids or kjson("get", "statefulset", "-n", NS, "events-broker")["spec"]["replicas"] != 3:
        fail("the refused scale-down removed or restarted a broker")
    if any(len(r) != 3 for r, _ in in_sync("replicated").values()):
        fail(f"the refused scale-down moved replicas: {in_sync('replicated')}")
    kubectl("scale", "cluster/events", "-n", NS, "--replicas=3")
    wait("ScaleDownBlocked cleared", lambda: condition(kjson("get", "cluster", "-n", NS, "events"),
                                                       "ScaleDownBlocked").get("status") == "False", 60)
    kubectl("patch", "cluster/events", "-n", NS, "--type=merge", "-p", '{"spec":{"controllers":{"replicas":3}}}')
    c = wait("voters [0, 1, 2]", voters_are([0, 1, 2]), 300)
    added = quorum_events("VoterAdded")
    step(f"voters {c['status']['quorum']['voters']}, leader {c['status']['quorum']['leader']}; added in order {added}")
    if added != [1, 2]:
        fail(f"VoterAdded events {added}: want 1 then 2")
    kafka_topics("--create", "--topic", "three-voters", "--partitions", "3")
    listed = kafka_topics("--list").split()
    if "one-voter" not in listed or "three-voters" not in listed:
        fail(f"topics created under each quorum not listed: {listed}")
    if pod_uids() != broker_uids:
        fail("changing controllers.replicas restarted a broker")
    if kjson("get", "configmap", "-n", NS, "events-config")["data"]["server.properties"] != properties:
        fail("changing controllers.replicas changed server.properties")
    load.finish()

    # A second Cluster, secured (tests/k8s/security_e2e.py), beside this one.
    run_security(T, NS)
    if pod_uids() != broker_uids:
        fail("the secured Cluster's steps restarted a broker of events")
    run_restricted(T)
    if pod_uids() != broker_uids:
        fail("the restricted Cluster's steps restarted a broker of events")

    step("helm upgrade restarts the operator and no broker")
    op_before = {p["metadata"]["uid"] for p in kjson("get", "pods", "-n", OP_NS)["items"]}
    run("helm", "upgrade", "oxbow", CHART, "-n", OP_NS, *HELM_SET, "--set", "logLevel=debug", "--wait",
        "--timeout", "180s")
    op_after = {p["metadata"]["uid"] for p in kjson("get", "pods", "-n", OP_NS)["items"]
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}
    if not op_after or op_after & op_before:
        fail(f"operator pods before {op_before}, after {op_after}")
    wait("Cluster events Ready under the new operator", cluster_ready("events"), 60)
    time.sleep(5)
    if pod_uids() != broker_uids:
        fail("helm upgrade restarted a broker")

    step("two operator replicas: one holds the Lease; when it stops, the other takes over and reconciles")
    run("helm", "upgrade", "oxbow", CHART, "-n", OP_NS, *HELM_SET, "--set", "replicaCount=2", "--wait",
        "--timeout", "180s")

    def running_operators():
        return {p["metadata"]["name"] for p in kjson("get", "pods", "-n", OP_NS)["items"]
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}

    def holder():
        lease = kjson("get", "lease", "-n", OP_NS, "oxbow-operator")
        h = (lease.get("spec") or {}).get("holderIdentity")
        return h if h in running_operators() else None

    kubectl("rollout", "status", "-n", OP_NS, "deployment/oxbow-operator", "--timeout=180s")
    # Only the new ReplicaSet's two pods: none of the rolled-out ones still terminating.
    wait("exactly two operator pods", lambda: len(running_operators()) == 2
         and len(kjson("get", "pods", "-n", OP_NS)["items"]) == 2, 120)
    leader = wait("a Lease holder among the running operators", holder, 60)
    follower = (running_operators() - {leader}).pop()
    wait(f"{follower} to report that another replica leads",
         lambda: "another replica leads" in kubectl("logs", "-n", OP_NS, follower), 60)
    kubectl("delete", "pod", "-n", OP_NS, leader, "--timeout=60s")
    # The follower, or the pod the ReplicaSet starts in the leader's place: whichever asks first.
    new_leader = wait("another replica to take the Lease over", lambda: (h := holder()) and h != leader and h, 60)
    step(f"{leader} released the Lease; {new_leader} leads")
    kubectl("apply", "-f", "-", input=topic_yaml("after-failover", 2))
    wait("Topic after-failover Ready under the new leader", topic_state("after-failover"), 120)

    step("the operator exported traces and metrics over OTLP")
    def exported():
        with sink.lock:
            spans = {s["name"] for s in sink.spans if s["service"] == "oxbow-operator"}
            done = {(a.get("controller"), a.get("result")) for n, a, v in sink.points
                    if n == "oxbow.operator.reconciles" and v > 0}
        return (spans, done) if "reconciling object" in spans and {("cluster", "success"),
                                                                    ("topic", "success")} <= done else None
    spans, done = wait("reconcile spans and counters at the stand-in collector", exported, 90)
    step(f"received {len(sink.spans)} spans ({sorted(spans)[:3]}...) and reconcile counters {sorted(done)}")

    step("every broker exported its metrics over OTLP (spec.telemetry)")
    def brokers_exported():
        with sink.lock:
            pods = {a.get("resource.k8s.pod.name") for n, a, v in sink.points
                    if n == "oxbow.broker.requests" and v > 0 and a.get("resource.service.name") == "oxbow-broker"
                    and a.get("resource.oxbow.cluster") == "events"}
            leaders = {a.get("resource.k8s.pod.name") for n, a, v in sink.points
                       if n == "oxbow.broker.partitions" and a.get("role") == "leader" and v > 0}
            active = {a.get("resource.k8s.pod.name") for n, a, v in sink.points
                      if n == "oxbow.controller.active" and v == 1}
        want = {f"events-broker-{i}" for i in range(BROKERS)}
        return (pods, leaders, active) if want <= pods and want <= leaders and active else None
    pods, leaders, active = wait("broker metrics at the stand-in collector", brokers_exported, 60)
    step(f"broker metrics from {sorted(pods)}; partition leaders on {sorted(leaders)}; active controller seen on {sorted(active)}")

    step("every broker exported request spans (spec.telemetry.traceSampleRatio 0.05)")
    def brokers_traced():
        with sink.lock:
            spans = [s for s in sink.spans if s["service"] == "oxbow-broker"
                     and s["resource"].get("oxbow.cluster") == "events"]
        by_pod = {s["resource"].get("k8s.pod.name") for s in spans
                  if s["attributes"].get("rpc.system") == "kafka" and s["attributes"].get("rpc.method") == s["name"]}
        return (by_pod, {s["name"] for s in spans}) if {f"events-broker-{i}" for i in range(BROKERS)} <= by_pod else None
    traced, names = wait("request spans from every broker at the stand-in collector", brokers_traced, 120)
    step(f"request spans from {sorted(traced)}: {sorted(names)}")

    step("deleting the namespace (a Cluster and a Topic with its finalizer in it) leaves nothing stuck")
    kubectl("apply", "-f", "-", input=topic_yaml("stays", 1))
    wait("Topic stays Ready", topic_state("stays"), 120)
    kubectl("delete", "namespace", NS, "--timeout=180s")
    wait("namespace gone", lambda: not kubectl("get", "namespace", NS, check=False).strip(), 180)

    step("helm uninstall removes the operator and keeps the CRDs")
    run("helm", "uninstall", "oxbow", "-n", OP_NS, "--wait", "--timeout", "120s")
    crds = {c["metadata"]["name"] for c in kjson("get", "crd")["items"]}
    if not {"clusters.oxbow.io", "topics.oxbow.io", "users.oxbow.io"} <= crds:
        fail(f"CRDs after uninstall: {crds}")
    wait("operator pods gone after uninstall", lambda: not kjson("get", "pods", "-n", OP_NS)["items"], 120)
    kubectl("delete", "namespace", OP_NS, "--timeout=120s")
    sink.close()
    step("operator e2e passed")


if __name__ == "__main__":
    os.environ.setdefault("KUBECONFIG", "/var/lib/oxbow-k8s/kubeconfig")
    main()
