"""The production-defaults part of the operator end to end (run by operator_e2e.py, or alone
against a test cluster where the chart is installed: `python3 tests/k8s/restricted_e2e.py`):

  - a namespace that enforces PodSecurity `restricted`; a Cluster `strict` of 3 brokers and 3
    dedicated controllers (`controllers.mode: dedicated`) created with no config, on claims of
    the test cluster's `local` volumes (which, unlike hostPath, honour fsGroup, as CSI drivers
    do): the operator's broker and controller pods are admitted, run as uid 65532 with a
    read-only root filesystem, write their volumes, become Ready and serve kcat (itself run as a
    restricted pod); the quorum's voters are the controllers (node ids 1000-1002), the brokers
    run `process.roles=broker`;
  - the controller count changes 3 -> 5 -> 3 (KIP-853 AddRaftVoter/RemoveRaftVoter, controller
    pods started before and removed after): no pod restarts, the records stay readable;
  - the Cluster's defaults come from its size: replication factor 3 and min.insync.replicas 2
    in server.properties, for an auto-created topic, for `__consumer_offsets` and for a Topic
    that names no replication factor (status.replicationFactor);
  - a rolling restart (a logLevel change: controllers first, then brokers) under Kafka's Java
    producer (idempotent, acks=all): every acknowledged record is read back, and a metadata poll throughout sees no partition
    without a leader or below min.insync.replicas (printed);
  - an impossible change (an image that cannot be pulled) shows `Ready=False` with the pod's
    cause (ErrImagePull or ImagePullBackOff, Kubernetes' message) and a Warning event; putting the
    image back recovers the Cluster by replacing the broken pod alone (the time is printed), and
    it serves again;
  - storage grows online: a larger `storage.size` resizes every broker's claim (the test
    cluster's provisioner expands its volumes), restarts nothing, keeps the records; a smaller
    one is refused (`Ready=False`, `StorageShrinkRefused`, a Warning event);
  - a change the API server refuses (a storage class change: claim templates are immutable)
    shows `Ready=False` with reason `Invalid` and the API server's message, and a Warning event;
    reverting it recovers.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from bench import java_classpath  # noqa: E402
from kubetest import REFUSALS, LoadProducer  # noqa: E402

NAME = "strict"
BROKERS = 3
NS = "oxbow-restricted"
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
              "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True}


# The roll's change, kept in every spec after it: a spec without it would restart every pod again.
ROLLED = {"template": {"logLevel": "info,oxbow_server=debug"}}


def cluster_yaml(spec_extra=None, controllers=3):
    spec = {"replicas": BROKERS, "controllers": {"mode": "dedicated", "replicas": controllers},
            "storage": {"size": "1Gi"}}
    spec.update(spec_extra or {})
    return json.dumps({"apiVersion": "oxbow.io/v1alpha1", "kind": "Cluster",
                       "metadata": {"name": NAME, "namespace": NS}, "spec": spec})


def client_pod():
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client", "namespace": NS},
        "spec": {"securityContext": RESTRICTED, "containers": [{
            "name": "client", "image": "localhost/oxbow/toolbox:dev", "command": ["sleep", "100000"],
            "securityContext": CONTAINER_RESTRICTED}]},
    })


def condition(obj, type_):
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), {})


def run_restricted(T):
    run, kubectl, kjson, step, fail, wait = T.run, T.kubectl, T.kjson, T.step, T.fail, T.wait
    T.namespaces.append(NS)
    hosts = tempfile.NamedTemporaryFile("w", prefix="oxbow-restricted-hosts", delete=False).name

    def cluster():
        return kjson("get", "clusters.oxbow.io", "-n", NS, NAME)

    def ready(want=True, reason=None):
        def check():
            c = cluster()
            r = condition(c, "Ready")
            if (c.get("status") or {}).get("observedGeneration") != c["metadata"]["generation"]:
                return None
            ok = r.get("status") == ("True" if want else "False") and (reason is None or r.get("reason") in reason)
            return c if ok else None
        return check

    def kcat(*args, input=None):
        return run("kubectl", "exec", "-i", "-n", NS, "client", "--", "kcat", "-b", f"{NAME}-bootstrap:9092",
                   *args, input=input).stdout

    def warnings():
        return [e for e in kjson("get", "events", "-n", NS)["items"]
                if e.get("type") == "Warning" and (e.get("regarding") or e.get("involvedObject") or {}).get("kind")
                == "Cluster"]

    def pod_uids():
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in
                kjson("get", "pods", "-n", NS, "-l", f"app.kubernetes.io/instance={NAME}")["items"]}

    def refresh_hosts():
        return T.broker_hosts(NS, NAME, hosts)

    step(f"namespace {NS} enforces PodSecurity restricted; a Cluster of {BROKERS} brokers and 3 dedicated "
         "controllers with no config")
    if kubectl("get", "namespace", NS, check=False).strip():
        kubectl("delete", "namespace", NS, "--timeout=180s")
    kubectl("create", "namespace", NS)
    kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/warn=restricted")
    kubectl("apply", "-f", "-", input=cluster_yaml())
    started = time.monotonic()
    c = wait(f"Cluster {NAME} Ready in the restricted namespace", ready(), 420)
    step(f"Ready after {time.monotonic() - started:.0f} s: {condition(c, 'Ready')['message']}")
    controller_pods = [f"{NAME}-controller-{i}" for i in (1000, 1001, 1002)]
    for claim in [f"data-{NAME}-broker-{i}" for i in range(BROKERS)] + [f"data-{p}" for p in controller_pods]:
        pvc = kjson("get", "pvc", "-n", NS, claim)
        pv = kjson("get", "pv", pvc["spec"]["volumeName"])
        if pvc["status"]["phase"] != "Bound" or "local" not in pv["spec"]:
            fail(f"claim {claim}: {pvc['status']}, volume {pv['spec']}")
    for name in (f"{NAME}-broker-0", controller_pods[0]):
        pod = kjson("get", "pod", "-n", NS, name)
        sc, csc = pod["spec"].get("securityContext", {}), pod["spec"]["containers"][0].get("securityContext", {})
        if (sc.get("runAsUser"), sc.get("fsGroup"), sc.get("runAsNonRoot"), csc.get("readOnlyRootFilesystem")) != (
                65532, 65532, True, True):
            fail(f"pod {name} securityContext {sc}, container {csc}")
    step(f"broker and controller pods run as uid {sc['runAsUser']}, fsGroup {sc['fsGroup']}, read-only root, "
         "on local volumes")
    st = c["status"]
    if (st.get("quorum") or {}).get("voters") != [1000, 1001, 1002] or [x["pod"] for x in st.get("controllers", [])] \
            != controller_pods or len(st.get("brokers", [])) != BROKERS or st.get("replicas") != BROKERS:
        fail(f"status with dedicated controllers: quorum {st.get('quorum')}, controllers {st.get('controllers')}, "
             f"brokers {st.get('brokers')}, replicas {st.get('replicas')}")
    data = kjson("get", "configmap", "-n", NS, f"{NAME}-config")["data"]
    if "process.roles=broker\n" not in data["server.properties"] or \
            "process.roles=controller\n" not in data.get("controller.properties", ""):
        fail(f"process.roles: brokers {data['server.properties']}, controllers {data.get('controller.properties')}")
    step(f"voters {st['quorum']['voters']} (leader {st['quorum'].get('leader')}) are the controller pods; "
         f"brokers run process.roles=broker; Ready: {condition(c, 'Ready')['message']}")

    step("the defaults come from the size: RF 3, min.insync.replicas 2")
    props = kjson("get", "configmap", "-n", NS, f"{NAME}-config")["data"]["server.properties"]
    for line in ("default.replication.factor=3", "min.insync.replicas=2", "offsets.topic.replication.factor=3",
                 "transaction.state.log.replication.factor=3", "transaction.state.log.min.isr=2"):
        if f"{line}\n" not in props:
            fail(f"server.properties lacks {line}: {props}")
    kubectl("apply", "-f", "-", input=client_pod())
    wait("client pod", lambda: kjson("get", "pod", "-n", NS, "client")["status"].get("phase") == "Running", 120)
    records = "".join(f"strict-{i}\n" for i in range(100))
    kcat("-P", "-t", "auto", "-X", "acks=all", input=records)
    got = kcat("-C", "-t", "auto", "-o", "beginning", "-e", "-q")
    if sorted(got.splitlines()) != sorted(records.splitlines()):
        fail(f"read back {len(got.splitlines())} records, want 100")
    # A consumer group creates __consumer_offsets.
    kcat("-G", "strict-group", "auto", "-o", "beginning", "-e", "-q")
    md = json.loads(kcat("-L", "-J"))
    rfs = {t["topic"]: {len(p["replicas"]) for p in t["partitions"]} for t in md["topics"]}
    if rfs.get("auto") != {3} or rfs.get("__consumer_offsets") != {3}:
        fail(f"replication factors {rfs}, want 3 for auto and __consumer_offsets")
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "oxbow.io/v1alpha1", "kind": "Topic", "metadata": {"name": "plain", "namespace": NS},
        "spec": {"cluster": NAME, "partitions": 3}}))
    t = wait("Topic plain Ready", lambda: (x := kjson("get", "topics.oxbow.io", "-n", NS, "plain"))
             and condition(x, "Ready").get("status") == "True" and x, 120)
    if t["status"].get("replicationFactor") != 3:
        fail(f"Topic plain with no replicationFactor: status {t['status']}")
    step(f"auto-created topic, __consumer_offsets and a Topic without replicationFactor: RF 3 ({rfs['auto']})")

    def voters():
        return ((cluster().get("status") or {}).get("quorum") or {}).get("voters")

    def controller_names():
        return sorted(p["metadata"]["name"] for p in kjson(
            "get", "pods", "-n", NS, "-l", f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=controller"
        )["items"])

    for count, ids in ((5, [1000, 1001, 1002, 1003, 1004]), (3, [1000, 1001, 1002])):
        step(f"the controller count changes to {count}: voters {ids}, no pod restarts")
        before = pod_uids()
        started = time.monotonic()
        kubectl("apply", "-f", "-", input=cluster_yaml(controllers=count))
        T.wait_equal(f"the quorum's voters {ids}", voters, ids, 300)
        T.wait_equal(f"{count} controller pods", controller_names, [f"{NAME}-controller-{i}" for i in ids], 180)
        c = wait(f"Cluster {NAME} Ready with {count} controllers", ready(), 180)
        now = pod_uids()
        restarted = [n for n, u in before.items() if n in now and now[n] != u]
        if restarted:
            fail(f"changing the controller count restarted {restarted}")
        events = sorted(e.get("note") or e.get("message") or "" for e in kjson("get", "events", "-n", NS)["items"]
                        if e.get("reason") in ("VoterAdded", "VoterRemoved"))
        step(f"voters {voters()} after {time.monotonic() - started:.0f} s, no pod restarted; "
             f"{condition(c, 'Ready')['message']}; events: {events}")
    got = kcat("-C", "-t", "auto", "-o", "beginning", "-e", "-q")
    if sorted(got.splitlines()) != sorted(records.splitlines()):
        fail(f"after the controller count changes read {len(got.splitlines())} records of auto, want 100")

    step("a rolling restart (logLevel: controllers, then brokers) under an idempotent acks=all Java producer")
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "oxbow.io/v1alpha1", "kind": "Topic", "metadata": {"name": "roll", "namespace": NS},
        "spec": {"cluster": NAME, "partitions": 6}}))
    wait("Topic roll Ready", lambda: condition(kjson("get", "topics.oxbow.io", "-n", NS, "roll"), "Ready")
         .get("status") == "True", 120)
    producer = LoadProducer(T, java_classpath(), hosts, refresh_hosts(), "roll", "r", 300)
    # Metadata once a second from inside the cluster, throughout the roll.
    poll = subprocess.Popen(
        ["kubectl", "exec", "-n", NS, "client", "--", "sh", "-c",
         f"while :; do kcat -b {NAME}-bootstrap:9092 -L -J -t roll -m 3 2>/dev/null; echo; sleep 1; done"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    samples, leaderless, below = [], [], []

    def watch():
        for line in poll.stdout:
            try:
                md = json.loads(line)
            except ValueError:
                continue
            parts = next((t["partitions"] for t in md.get("topics", []) if t["topic"] == "roll"), [])
            if len(parts) != 6:
                continue
            samples.append(time.time())
            leaderless.extend(p["partition"] for p in parts if p.get("leader", -1) < 0)
            below.extend((p["partition"], len(p["isrs"])) for p in parts if len(p["isrs"]) < 2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stop_refresh = threading.Event()

    def keep_hosts():
        while not stop_refresh.wait(2):
            try:
                refresh_hosts()
            except (SystemExit, Exception):  # noqa: BLE001 - the next round retries
                pass

    threading.Thread(target=keep_hosts, daemon=True).start()
    time.sleep(10)
    before = pod_uids()
    kubectl("apply", "-f", "-", input=cluster_yaml(ROLLED))
    wait("every pod restarted", lambda: all(pod_uids().get(n) not in (None, u) for n, u in before.items()), 900)
    created = sorted((p["metadata"]["creationTimestamp"], p["metadata"]["name"]) for p in kjson(
        "get", "pods", "-n", NS, "-l", f"app.kubernetes.io/instance={NAME}")["items"])
    order = [n for _, n in created]
    if any("-controller-" in n for n in order[len(controller_pods):]):
        fail(f"restart order {order}: the controllers restart before the brokers")
    step(f"restart order: {', '.join(order)}")
    wait(f"Cluster {NAME} Ready after the roll", ready(), 300)
    time.sleep(10)

    def diagnostics():
        return (f"\nmetadata polls during the roll: {len(samples)}, partitions without a leader {leaderless[:20]}, "
                f"(partition, ISR size) below min.insync.replicas {below[:20]}"
                + T.broker_log_lines(NS, NAME, REFUSALS + ("ISR", "produce failed", "WARN", "ERROR")))

    summary, acked = producer.finish(diagnostics)
    stop_refresh.set()
    poll.terminate()
    final = [k for k in kcat("-C", "-t", "roll", "-o", "beginning", "-e", "-q", "-f", "%k\n").split()
             if k.startswith("r")]
    lost, dup = acked - set(final), len(final) - len(set(final))
    step(f"roll under load: acknowledged {len(acked)} / lost {len(lost)} / duplicated {dup}; producer failed "
         f"{summary['failed']}, longest stall {summary['longest_stall_ms']} ms; metadata polled {len(samples)} "
         f"times: partitions without a leader {len(leaderless)}, below min.insync.replicas {len(below)}")
    if lost or dup:
        fail(f"roll under load: lost {sorted(lost)[:10]}, {dup} duplicated, summary {summary}")
    if len(samples) < 10 or leaderless or below:
        fail(f"during the roll: {len(samples)} samples, leaderless {leaderless[:10]}, below min ISR {below[:10]}")

    step("an image that cannot be pulled: Ready=False with the pod's cause, a Warning event")
    seen = {(e.get("reason"), e.get("note") or e.get("message")) for e in warnings()}
    kubectl("apply", "-f", "-", input=cluster_yaml({**ROLLED, "image": "localhost/oxbow/no-such-image:dev"}))
    pulled = ("ErrImagePull", "ImagePullBackOff")
    c = wait("Ready=False with an image pull reason", ready(False, pulled), 300)
    msg = condition(c, "Ready")["message"]
    broken = [b for b in c["status"]["brokers"] + c["status"].get("controllers", []) if b.get("reason") in pulled]
    if not broken or "no-such-image" not in msg or broken[0]["pod"] not in msg:
        fail(f"Ready message {msg!r}, brokers {c['status']['brokers']}, controllers {c['status'].get('controllers')}")
    new = wait("a Warning event naming the pull failure", lambda: [
        e for e in warnings() if e.get("reason") in pulled and (e.get("reason"), e.get("note") or e.get("message"))
        not in seen], 60)
    note = new[0].get("note") or new[0].get("message") or ""
    step(f"Ready: {condition(c, 'Ready')['reason']}: {msg[:200]}; Warning event: {new[0].get('reason')}: {note[:200]}")
    healthy = {n: u for n, u in pod_uids().items() if n != broken[0]["pod"]}
    kubectl("apply", "-f", "-", input=cluster_yaml(ROLLED))
    put_back = time.monotonic()
    wait(f"Cluster {NAME} Ready again with the image put back", ready(), 420)
    recovery = time.monotonic() - put_back
    if {n: u for n, u in pod_uids().items() if n in healthy} != healthy:
        fail(f"putting the image back restarted pods that were serving: {healthy} -> {pod_uids()}")
    got = kcat("-C", "-t", "auto", "-o", "beginning", "-e", "-q")
    if sorted(got.splitlines()) != sorted(records.splitlines()):
        fail(f"after recovering read {len(got.splitlines())} records of auto, want 100")
    step(f"recovered {recovery:.0f} s after the image was put back (only the broken pod "
         f"{broken[0]['pod']} replaced): every broker Ready, records intact")

    def claims():
        """claim -> (requested, capacity) of the Cluster's broker claims."""
        return {c["metadata"]["name"]: (c["spec"]["resources"]["requests"]["storage"],
                                        (c.get("status") or {}).get("capacity", {}).get("storage"))
                for c in kjson("get", "pvc", "-n", NS)["items"]
                if c["metadata"]["name"].startswith(f"data-{NAME}-broker-")}

    def template_size():
        sts = kjson("get", "statefulset", "-n", NS, f"{NAME}-broker")
        return sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]

    step("storage grows online: 1Gi -> 2Gi resizes every broker's claim and restarts nothing")
    before = pod_uids()
    kubectl("apply", "-f", "-", input=cluster_yaml({**ROLLED, "storage": {"size": "2Gi"}}))
    got = wait("every broker claim at 2Gi (requested and capacity)", lambda: (c := claims()) and len(c) == BROKERS
               and all(v == ("2Gi", "2Gi") for v in c.values()) and c, 180)
    wait(f"Cluster {NAME} Ready at 2Gi", ready(), 120)
    resized = {e.get("note") or e.get("message") for e in kjson("get", "events", "-n", NS)["items"]
               if e.get("reason") == "ResizingStorage"}
    if len(resized) != BROKERS or template_size() != "1Gi" or pod_uids() != before:
        fail(f"resize events {resized}, template {template_size()}, pods restarted: {pod_uids() != before}")
    got_records = kcat("-C", "-t", "auto", "-o", "beginning", "-e", "-q")
    if sorted(got_records.splitlines()) != sorted(records.splitlines()):
        fail(f"after the resize read {len(got_records.splitlines())} records of auto, want 100")
    step(f"claims {got}; {len(resized)} ResizingStorage events; the StatefulSet's template keeps 1Gi "
         "(immutable); no broker restarted; records intact")

    step("a shrink is refused: Ready=False, reason StorageShrinkRefused, a Warning event")
    kubectl("apply", "-f", "-", input=cluster_yaml({**ROLLED, "storage": {"size": "1Gi"}}))
    c = wait("Ready=False with reason StorageShrinkRefused", ready(False, ("StorageShrinkRefused",)), 120)
    msg = condition(c, "Ready")["message"]
    if "cannot shrink" not in msg or any(v != ("2Gi", "2Gi") for v in claims().values()):
        fail(f"Ready message {msg!r}, claims {claims()}")
    wait("a Warning event with reason StorageShrinkRefused",
         lambda: [e for e in warnings() if e.get("reason") == "StorageShrinkRefused"], 60)
    step(f"Ready: StorageShrinkRefused: {msg[:200]}")
    kubectl("apply", "-f", "-", input=cluster_yaml({**ROLLED, "storage": {"size": "2Gi"}}))
    wait(f"Cluster {NAME} Ready again at 2Gi", ready(), 120)

    step("a change the API server refuses (a storage class: claim templates are immutable): Ready=False, "
         "reason Invalid, its message")
    kubectl("apply", "-f", "-", input=cluster_yaml({**ROLLED, "storage": {"size": "2Gi", "storageClass": "other"}}))
    c = wait("Ready=False with reason Invalid", ready(False, ("Invalid",)), 120)
    msg = condition(c, "Ready")["message"]
    if "StatefulSet" not in msg or "Forbidden" not in msg:
        fail(f"Ready message {msg!r}")
    wait("a Warning event with reason Invalid", lambda: [e for e in warnings() if e.get("reason") == "Invalid"], 60)
    step(f"Ready: Invalid: {msg[:200]}")
    kubectl("apply", "-f", "-", input=cluster_yaml({**ROLLED, "storage": {"size": "2Gi"}}))
    wait(f"Cluster {NAME} Ready again with the class put back", ready(), 180)

    step(f"removing namespace {NS}")
    kubectl("delete", "namespace", NS, "--timeout=300s")
    T.namespaces.remove(NS)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kubetest import Suite
    run_restricted(Suite("restricted-e2e", []))
