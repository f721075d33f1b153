#!/usr/bin/env python3
"""Smoke test of the test cluster (tests/k8s/up), with our own images (tests/k8s/load-images).

Applies a StatefulSet of 3 oxbow-broker pods (a toolbox sidecar gives each pod nslookup) with a
headless Service, a ClusterIP Service and a PVC template, then checks that:
  - every pod runs and is Ready, every claim is Bound to a dynamically provisioned volume;
  - each pod resolves each peer's stable DNS name to that peer's pod IP, and the ClusterIP
    Service's name to its ClusterIP;
  - the ClusterIP Service routes Kafka connections from the host to one of the brokers;
  - records written to oxb-0 survive deleting the pod: the new pod mounts the same volume and
    serves the same records at the same offsets;
  - deleting the namespace deletes the claims and their volumes.
Exits non-zero with the reason on the first failure.
"""

import os
import subprocess
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kubetest import Suite

NS = "oxbow-smoke"
REPLICAS = 3
DOMAIN = "cluster.local"


T = Suite("smoke", [NS])
kubectl, kjson, step, fail, wait, wait_equal = T.kubectl, T.kjson, T.step, T.fail, T.wait, T.wait_equal


MANIFEST = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: v1
kind: Service
metadata: {{name: oxb, namespace: {NS}}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {{app: oxb}}
  ports: [{{name: kafka, port: 9092}}]
---
apiVersion: v1
kind: Service
metadata: {{name: oxb-bootstrap, namespace: {NS}}}
spec:
  type: ClusterIP
  selector: {{app: oxb}}
  ports: [{{name: kafka, port: 9092, targetPort: 9092}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: oxb, namespace: {NS}}}
spec:
  serviceName: oxb
  replicas: {REPLICAS}
  podManagementPolicy: Parallel
  selector:
    matchLabels: {{app: oxb}}
  template:
    metadata:
      labels: {{app: oxb}}
    spec:
      terminationGracePeriodSeconds: 10
      # The broker image runs as uid 65532: the claim becomes its own through fsGroup (the test
      # cluster's local volumes honour it, as CSI volumes do).
      securityContext: {{fsGroup: 65532}}
      containers:
      - name: broker
        image: localhost/oxbow/oxbow-broker:dev
        imagePullPolicy: IfNotPresent
        args:
        - --override=node.id=$(NODE_ID)
        - --override=listeners=PLAINTEXT://0.0.0.0:9092
        - --override=advertised.listeners=PLAINTEXT://$(POD_IP):9092
        - --override=log.dirs=/var/lib/oxbow/data
        env:
        - name: POD_IP
          valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
        - name: NODE_ID
          valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}}}
        ports: [{{name: kafka, containerPort: 9092}}]
        readinessProbe:
          tcpSocket: {{port: 9092}}
          periodSeconds: 1
        volumeMounts: [{{name: data, mountPath: /var/lib/oxbow}}]
      - name: toolbox
        image: localhost/oxbow/toolbox:dev
        imagePullPolicy: IfNotPresent
        command: [sh, -c, 'trap "exit 0" TERM; while :; do sleep 1; done']
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      resources:
        requests: {{storage: 1Gi}}
"""


def pods():
    return {p["metadata"]["name"]: p for p in kjson("get", "pods", "-n", NS, "-l", "app=oxb")["items"]}


def ready(p):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))


def all_ready():
    ps = pods()
    if len(ps) == REPLICAS and all(ready(p) for p in ps.values()):
        return ps
    return None


def nslookup(pod, name):
    """{answered name: sorted addresses} from busybox nslookup in the pod's toolbox container.

    busybox tries every search domain and exits 1 if any of them is NXDOMAIN, so the exit code
    says nothing; the answers do. Server lines come before the first "Name:" and are skipped.
    """
    p = subprocess.run(
        ["kubectl", "exec", "-n", NS, pod, "-c", "toolbox", "--", "nslookup", name],
        capture_output=True,
        text=True,
    )
    answers, current = {}, None
    for line in p.stdout.splitlines():
        if line.startswith("Name:"):
            current = line.split()[-1].rstrip(".")
        elif line.startswith("Address") and current:
            answers.setdefault(current, set()).add(line.split()[-1])
    return {k: sorted(v) for k, v in answers.items()} or None


def main():
    if kubectl("get", "namespace", NS, check=False).strip():
        step(f"removing namespace {NS} left from an earlier run")
        kubectl("delete", "namespace", NS, "--wait=true", "--timeout=120s")

    step("applying a StatefulSet of 3 oxbow-broker pods, a headless and a ClusterIP Service")
    kubectl("apply", "-f", "-", input=MANIFEST)
    ps = wait("3 Ready pods", all_ready)
    ips = {name: p["status"]["podIP"] for name, p in ps.items()}
    step(f"pods Ready: {ips}")

    claims = kjson("get", "pvc", "-n", NS)["items"]
    bound = {c["metadata"]["name"]: c["spec"].get("volumeName") for c in claims if c["status"]["phase"] == "Bound"}
    if sorted(bound) != [f"data-oxb-{i}" for i in range(REPLICAS)]:
        fail(f"claims bound: {bound}")
    step(f"claims Bound: {bound}")

    step("each pod resolves every peer by its stable DNS name")
    for src in sorted(ips):
        for dst in sorted(ips):
            fqdn = f"{dst}.oxb.{NS}.svc.{DOMAIN}"
            # DNS converges: a name reused from an earlier run may be cached (TTL 30 s) for a while.
            want = {fqdn: [ips[dst]]}
            wait_equal(f"{src} to resolve {fqdn}", lambda: nslookup(src, fqdn), want, timeout=90)
    svc_ip = kjson("get", "service", "-n", NS, "oxb-bootstrap")["spec"]["clusterIP"]
    got = nslookup("oxb-1", "oxb-bootstrap")
    if got != {f"oxb-bootstrap.{NS}.svc.{DOMAIN}": [svc_ip]}:
        fail(f"oxb-1 resolved the short name oxb-bootstrap (through its search domains) to {got}, want {svc_ip}")
    step(f"peers resolve; oxb-bootstrap -> {svc_ip}")

    step("the ClusterIP Service routes Kafka clients from the host to a broker")
    admin = AdminClient({"bootstrap.servers": f"{svc_ip}:9092"})
    seen = set()
    for _ in range(6):
        md = admin.list_topics(timeout=30)
        if len(md.brokers) != 1:
            fail(f"metadata through {svc_ip} lists brokers {md.brokers}")
        b = next(iter(md.brokers.values()))
        if (b.host, b.port) != (ips[f"oxb-{b.id}"], 9092):
            fail(f"broker {b.id} through the Service advertises {b.host}:{b.port}, want {ips[f'oxb-{b.id}']}:9092")
        seen.add(b.id)
        admin = AdminClient({"bootstrap.servers": f"{svc_ip}:9092"})  # a new connection each time
    del admin  # clients that outlive their brokers keep reconnecting: destroy each after use
    step(f"metadata through the Service answered by broker(s) {sorted(seen)}")

    step("the ClusterIP Service routes from inside a pod: a raw ApiVersions request through it")
    # ApiVersions v0, correlation id 7, null client id; the answer starts with its size, the
    # correlation id and error code 0. Pod-to-Service traffic takes a different NAT path from the
    # host's (PREROUTING, not OUTPUT), so both are checked.
    script = (
        r"printf '\000\000\000\012\000\022\000\000\000\000\000\007\377\377' | "
        "busybox nc -w 5 oxb-bootstrap 9092 | busybox od -An -tx1 | busybox head -1"
    )
    out = kubectl("exec", "-n", NS, "oxb-2", "-c", "toolbox", "--", "sh", "-c", script, check=False).split()
    if out[4:10] != ["00", "00", "00", "07", "00", "00"]:
        fail(f"ApiVersions through oxb-bootstrap from oxb-2 answered {out}")
    step(f"ApiVersions through the Service from oxb-2: response of {int(''.join(out[:4]), 16)} bytes, error 0")

    step("writing 100 records to oxb-0, then deleting the pod")
    before = pods()["oxb-0"]
    target = f"{ips['oxb-0']}:9092"
    admin0 = AdminClient({"bootstrap.servers": target})
    admin0.create_topics([NewTopic("smoke", 1, 1)])["smoke"].result(30)
    prod = Producer({"bootstrap.servers": target, "acks": "all", "linger.ms": 5})
    want = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(100)]
    for k, v in want:
        prod.produce("smoke", key=k, value=v)
    if prod.flush(30) != 0:
        fail("records not acknowledged by oxb-0")
    del prod, admin0
    kubectl("delete", "pod", "-n", NS, "oxb-0", "--wait=true", "--timeout=120s")

    def replaced():
        p = pods().get("oxb-0")
        return p if p and p["metadata"]["uid"] != before["metadata"]["uid"] and ready(p) else None

    after = wait("oxb-0 to come back Ready", replaced)
    vols = lambda p: [v.get("persistentVolumeClaim", {}).get("claimName") for v in p["spec"]["volumes"]]  # noqa: E731
    if "data-oxb-0" not in vols(after):
        fail(f"new oxb-0 mounts {vols(after)}")
    new_target = f"{after['status']['podIP']}:9092"
    cons = Consumer({"bootstrap.servers": new_target, "group.id": "unused", "enable.auto.commit": False})
    cons.assign([TopicPartition("smoke", 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(want) and time.monotonic() < deadline:
        m = cons.poll(1)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        got.append((m.offset(), m.key(), m.value()))
    cons.close()
    expect = [(i, k, v) for i, (k, v) in enumerate(want)]
    if got != expect:
        fail(f"after the pod was replaced, read {len(got)} records; first differences: "
             f"{[g for g, e in zip(got, expect) if g != e][:3]}")
    step(f"new oxb-0 ({new_target}) serves all 100 records at offsets 0..99 from the same volume")
    # Deleting a pod sends SIGTERM: the broker closes its logs and marks the shutdown clean, so
    # the new pod has nothing to recover.
    loaded = [line for line in kubectl("logs", "-n", NS, "oxb-0", "-c", "broker").splitlines() if "storage loaded" in line]
    if len(loaded) != 1 or "recovered_partitions=0" not in loaded[0]:
        fail(f"the replaced broker did not start from a clean shutdown: {loaded}")
    step("the deleted broker shut down cleanly on SIGTERM (nothing to recover on restart)")

    pvs = [bound[c] for c in bound]
    step("deleting the namespace; the claims' volumes must go with it")
    kubectl("delete", "namespace", NS, "--wait=true", "--timeout=180s")
    wait("provisioned volumes to be deleted",
         lambda: not any(kubectl("get", "pv", v, check=False, ).strip() for v in pvs), timeout=120)
    step("smoke test passed")


if __name__ == "__main__":
    os.environ.setdefault("KUBECONFIG", "/var/lib/oxbow-k8s/kubeconfig")
    main()
