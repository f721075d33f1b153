#!/usr/bin/env python3
"""End-to-end test of the operator and its Helm chart on the test cluster (tests/k8s/up), with
the images tests/k8s/load-images built.

  - `helm lint`, and the rendered chart validated by the real API server (server-side dry run);
  - `helm install`: the operator runs;
  - bad Clusters are refused by `kubectl apply` with the schema's message;
  - a Cluster of 1 broker becomes Ready; kcat (a real client, inside the cluster) reads its
    metadata through the bootstrap Service and the broker's stable DNS name, writes and reads
    records;
  - a config change restarts the broker exactly once (new pod, Ready again, config applied,
    clean shutdown, records intact), with an Event saying why;
  - `helm upgrade` restarts the operator but no broker; `helm uninstall` removes the operator
    and keeps the CRDs (and so every Cluster);
  - deleting the namespace leaves nothing stuck.
Exits non-zero with the reason on the first failure.
"""

import json
import os
import time

from kubetest import Suite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "charts", "oxbow")
NS = "oxbow-e2e"
OP_NS = "oxbow-system"
HELM_SET = [
    "--set", "image.repository=localhost/oxbow/oxbow-operator",
    "--set", "image.tag=dev",
    "--set", "brokerImage=localhost/oxbow/oxbow-broker:dev",
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


def cluster_yaml(config=None):
    if config:
        cfg = "config:" + "".join(f'\n    {k}: "{v}"' for k, v in config.items())
    else:
        cfg = "config: {}"
    return f"""
apiVersion: oxbow.io/v1alpha1
kind: Cluster
metadata: {{name: events, namespace: {NS}}}
spec:
  replicas: 1
  storage: {{size: 1Gi}}
  {cfg}
"""


def kcat(*args, input=None):
    return run("kubectl", "exec", "-i", "-n", NS, "client", "--", "kcat", "-b", "events-bootstrap:9092", *args,
               input=input).stdout


def main():
    step("helm lint and a server-side dry run of the rendered chart")
    run("helm", "lint", CHART)
    if not kubectl("get", "namespace", OP_NS, check=False).strip():
        kubectl("create", "namespace", OP_NS)
    rendered = run("helm", "template", "oxbow", CHART, "-n", OP_NS, *HELM_SET).stdout
    # CRDs first: the dry run of the example resources needs them; this validates every
    # rendered object against the API server's real schemas.
    run("kubectl", "apply", "--dry-run=server", "-f", "-", input=rendered)

    step("helm install")
    for leftover in (NS,):
        if kubectl("get", "namespace", leftover, check=False).strip():
            kubectl("delete", "namespace", leftover, "--timeout=120s")
    run("helm", "uninstall", "oxbow", "-n", OP_NS, check=False)
    run("helm", "install", "oxbow", CHART, "-n", OP_NS, "--create-namespace", *HELM_SET, "--wait", "--timeout", "180s")
    kubectl("create", "namespace", NS)

    step("bad Clusters are refused by the schema")
    bad = {
        "replicas: 3": ("replicas: 1", "replicas: 3", "replicas must be 1"),
        "a reserved config key": ("config: {", "config: {node.id: \"7\"", "the operator sets them"),
    }
    for what, (old, new, message) in bad.items():
        p = run("kubectl", "apply", "-f", "-", input=cluster_yaml().replace(old, new, 1), check=False)
        if p.returncode == 0 or message not in p.stderr:
            fail(f"a Cluster with {what} was not refused with '{message}': rc={p.returncode} {p.stderr}")

    step("a Cluster of 1 broker becomes Ready")
    kubectl("apply", "-f", "-", input=cluster_yaml())
    c = wait("Cluster events Ready", cluster_ready("events"))
    st = c["status"]
    if st["readyBrokers"] != 1 or st["bootstrapServers"] != f"events-bootstrap.{NS}.svc.cluster.local:9092":
        fail(f"status: {st}")
    pvc = kjson("get", "pvc", "-n", NS, "data-events-broker-0")
    if pvc["status"]["phase"] != "Bound":
        fail(f"claim not bound: {pvc['status']}")

    step("kcat inside the cluster: metadata, produce, consume")
    kubectl("run", "client", "-n", NS, "--image=localhost/oxbow/toolbox:dev", "--restart=Never",
            "--command", "--", "sleep", "100000")
    wait("client pod", lambda: kjson("get", "pod", "-n", NS, "client")["status"].get("phase") == "Running", 90)
    md = json.loads(kcat("-L", "-J"))
    want_host = f"events-broker-0.events-brokers.{NS}.svc.cluster.local"
    if [(b["id"], b["name"]) for b in md["brokers"]] != [(0, f"{want_host}:9092")]:
        fail(f"metadata brokers: {md['brokers']}")
    records = "".join(f"record-{i}\n" for i in range(50))
    kcat("-P", "-t", "e2e", "-p", "0", input=records)  # the broker creates the topic on first use
    got = kcat("-C", "-t", "e2e", "-p", "0", "-o", "beginning", "-e", "-q")
    if got != records:
        fail(f"read back {len(got.splitlines())} records, want 50")

    step("a config change restarts the broker once and applies the config")
    pod_before = kjson("get", "pod", "-n", NS, "events-broker-0")["metadata"]["uid"]
    kubectl("apply", "-f", "-", input=cluster_yaml({"log.retention.ms": "3600000"}))
    c = wait("Cluster events Ready after the restart", cluster_ready("events"), 240)
    pod = kjson("get", "pod", "-n", NS, "events-broker-0")
    if pod["metadata"]["uid"] == pod_before:
        fail("the broker pod was not restarted")
    restarts = [e for e in kjson("get", "events", "-n", NS)["items"] if e.get("reason") == "RestartingBroker"]
    if len(restarts) != 1 or "events-broker-0" not in (restarts[0].get("note") or restarts[0].get("message", "")):
        fail(f"RestartingBroker events: {restarts}")
    cfg = kjson("get", "configmap", "-n", NS, "events-config")["data"]["server.properties"]
    if "log.retention.ms=3600000\n" not in cfg:
        fail(f"server.properties: {cfg}")
    logs = kubectl("logs", "-n", NS, "events-broker-0")
    loaded = [line for line in logs.splitlines() if "storage loaded" in line]
    if len(loaded) != 1 or "recovered_partitions=0" not in loaded[0]:
        fail(f"the restarted broker did not start from a clean shutdown: {loaded}")
    got = kcat("-C", "-t", "e2e", "-p", "0", "-o", "beginning", "-e", "-q")
    if got != records:
        fail(f"after the restart read {len(got.splitlines())} records, want 50")
    time.sleep(5)  # a second, wrong restart would show within a reconcile or two
    if kjson("get", "pod", "-n", NS, "events-broker-0")["metadata"]["uid"] != pod["metadata"]["uid"]:
        fail("the broker restarted a second time")

    step("helm upgrade restarts the operator and no broker")
    broker_uid = pod["metadata"]["uid"]
    op_before = {p["metadata"]["uid"] for p in kjson("get", "pods", "-n", OP_NS)["items"]}
    run("helm", "upgrade", "oxbow", CHART, "-n", OP_NS, *HELM_SET, "--set", "logLevel=debug", "--wait",
        "--timeout", "180s")
    op_after = {p["metadata"]["uid"] for p in kjson("get", "pods", "-n", OP_NS)["items"]
                if p["status"].get("phase") == "Running"}
    if not op_after or op_after & op_before:
        fail(f"operator pods before {op_before}, after {op_after}")
    wait("Cluster events Ready under the new operator", cluster_ready("events"), 60)
    time.sleep(5)
    if kjson("get", "pod", "-n", NS, "events-broker-0")["metadata"]["uid"] != broker_uid:
        fail("helm upgrade restarted the broker")

    step("helm uninstall keeps the CRDs and the Cluster")
    run("helm", "uninstall", "oxbow", "-n", OP_NS, "--wait", "--timeout", "120s")
    crds = {c["metadata"]["name"] for c in kjson("get", "crd")["items"]}
    if not {"clusters.oxbow.io", "topics.oxbow.io"} <= crds:
        fail(f"CRDs after uninstall: {crds}")
    kjson("get", "cluster", "-n", NS, "events")

    step("deleting the namespace leaves nothing stuck")
    kubectl("delete", "namespace", NS, "--timeout=180s")
    wait("namespace gone", lambda: not kubectl("get", "namespace", NS, check=False).strip(), 180)
    kubectl("delete", "namespace", OP_NS, "--timeout=120s")
    step("operator e2e passed")


if __name__ == "__main__":
    os.environ.setdefault("KUBECONFIG", "/var/lib/oxbow-k8s/kubeconfig")
    main()
