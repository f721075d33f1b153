"""The Helm chart end to end on the test cluster (after operator_e2e.py, which leaves no Cluster):

  - the quickstart of docs/kubernetes.md, run as written (its sh blocks, with the test images in
    place of the registry's): helm install, a 3-broker Cluster and a Topic, `kubectl wait
    --for=condition=Ready`, kcat in a pod writes three records and reads them back;
  - two releases in two namespaces, each watching its own (`watchNamespaces`), the first
    installing the CRDs and the second not (`crds.install=false`): each operator reconciles the
    Cluster and Topic of its namespace and cannot read the other's (RBAC); its pods pass their
    liveness and readiness probes, have a PodDisruptionBudget, and serve Prometheus metrics
    (`/metrics`, read through the API server's pod proxy) counting their reconciles;
  - the first release also runs the chart's OpenTelemetry Collector (observability.collector,
    with the collector tests/observability/build makes): its operator and its Cluster's broker,
    which names no telemetry endpoint, export to it, and it serves their metrics in Prometheus
    format with the values this Cluster fixes; the dashboards are ConfigMaps for Grafana's sidecar
    (observability.dashboards), the shipped JSON byte for byte; every query of the operator's
    dashboard returns data from a Prometheus on this host scraping that collector;
  - `helm lint` with the defaults and with a file setting every value (tests/k8s/helm-every-value.yaml,
    checked to cover every value of values.yaml), and a server-side dry run of what that renders.
Exits non-zero with the reason on the first failure.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from kubetest import Suite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "charts", "oxbow")
EVERY = os.path.join(ROOT, "tests", "k8s", "helm-every-value.yaml")
TEAMS = ["team-a", "team-b"]
QUICK_NS = "streaming"
IMAGES = ["--set", "image.repository=localhost/oxbow/oxbow-operator", "--set", "image.tag=dev",
          "--set", "brokerImage=localhost/oxbow/oxbow-broker:dev"]
CRDS = ["clusters.oxbow.io", "topics.oxbow.io", "users.oxbow.io"]
# The chart's collector, with the collector tests/observability/build makes (load-images).
COLLECTOR = ["--set", "observability.collector.enabled=true",
             "--set", "observability.collector.image.repository=localhost/oxbow/otelcol",
             "--set", "observability.collector.image.tag=dev", "--set", "observability.dashboards.enabled=true",
             "--set", "observability.collector.exportIntervalSeconds=5"]

T = Suite("helm-e2e", TEAMS + [QUICK_NS],
          extra_dumps=[["logs", "-n", ns, f"deploy/{ns}-operator", "--tail=30"] for ns in TEAMS])
run, kubectl, kjson, step, fail, wait = T.run, T.kubectl, T.kjson, T.step, T.fail, T.wait


def ready(kind, name, ns):
    def check():
        obj = kjson("get", kind, name, "-n", ns)
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in (obj.get("status") or {}).get("conditions", []))
    return check


def leaves(tree, prefix=""):
    """Dotted paths of a values tree's leaves; a list or a map that is empty by default is one
    leaf (its items are the user's)."""
    if isinstance(tree, dict) and tree:
        return {p for k, v in tree.items() for p in leaves(v, f"{prefix}{k}.")}
    return {prefix.rstrip(".")}


def no_oxbow_resources():
    """Only on a test cluster with nothing of ours left: the CRDs go, so the first release can
    own them."""
    for kind in CRDS:
        if kubectl("get", kind, "-A", "-o", "name", check=False).strip():
            fail(f"{kind} resources are left over from an earlier test")
    kubectl("delete", "crd", *CRDS, "--ignore-not-found", "--timeout=60s")


def quickstart():
    """docs/kubernetes.md's Quickstart: every sh block, in order, with the test images."""
    text = open(os.path.join(ROOT, "docs", "kubernetes.md")).read()
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = [re.sub(r"^   ", "", b, flags=re.M) for b in re.findall(r"```sh\n(.*?)```", section, re.S)]
    if len(blocks) < 5:
        fail(f"the Quickstart has {len(blocks)} sh blocks; this test expects install, create, wait, write, read")
    subst = [("REGISTRY/oxbow-operator", "localhost/oxbow/oxbow-operator"), ("image.tag=TAG", "image.tag=dev"),
             ("REGISTRY/oxbow-broker:TAG", "localhost/oxbow/oxbow-broker:dev"),
             # The toolbox image has kcat but no entrypoint: name the command.
             ("--image=docker.io/edenhill/kcat:1.7.1 --", "--image=localhost/oxbow/toolbox:dev --command -- kcat"),
             ("--image=docker.io/edenhill/kcat:1.7.1 \\\n  --", "--image=localhost/oxbow/toolbox:dev \\\n  --command -- kcat")]
    out = ""
    for i, block in enumerate(blocks):
        for a, b in subst:
            block = block.replace(a, b)
        for a, _ in subst:
            if a in block:
                fail(f"quickstart block {i + 1} still names {a}")
        step(f"quickstart block {i + 1}: {block.strip().splitlines()[0]}")
        out = run("bash", "-euo", "pipefail", "-c", block).stdout
    got = sorted(line for line in out.split() if line.startswith("order-"))
    if got != ["order-1", "order-2", "order-3"]:
        fail(f"the quickstart's last step printed {out!r}; want the three records")
    step("quickstart: kcat in the cluster read back order-1, order-2, order-3")
    kubectl("delete", "namespace", QUICK_NS, "--timeout=180s")
    run("helm", "uninstall", "oxbow", "-n", "oxbow-system", "--wait", "--timeout", "120s")


def cluster_and_topic(ns):
    return f"""apiVersion: oxbow.io/v1alpha1
kind: Cluster
metadata: {{name: c, namespace: {ns}}}
spec:
  replicas: 1
  controllers: {{replicas: 1}}
  storage: {{ephemeral: true}}
---
apiVersion: oxbow.io/v1alpha1
kind: Topic
metadata: {{name: t, namespace: {ns}}}
spec: {{cluster: c, partitions: 2}}
"""


def two_releases():
    for ns in TEAMS:
        # Fresh namespaces: Events left by an earlier run would be counted.
        if kubectl("get", "namespace", ns, check=False).strip():
            run("helm", "uninstall", ns, "-n", ns, check=False)
            kubectl("delete", "namespace", ns, "--timeout=180s")
        kubectl("create", "namespace", ns)
    step("release team-a (installs the CRDs, with the chart's collector and dashboards) and team-b "
         "(crds.install=false), each watching its own namespace")
    run("helm", "install", "team-a", CHART, "-n", "team-a", *IMAGES, "--set", "watchNamespaces={team-a}",
        *COLLECTOR, "--wait", "--timeout", "180s")
    run("helm", "install", "team-b", CHART, "-n", "team-b", *IMAGES, "--set", "watchNamespaces={team-b}",
        "--set", "crds.install=false", "--wait", "--timeout", "180s")
    owners = {c["metadata"]["name"]: (c["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name")
              for c in kjson("get", "crd")["items"] if c["metadata"]["name"] in CRDS}
    if owners != {c: "team-a" for c in CRDS}:
        fail(f"CRD owners {owners}; want every CRD owned by release team-a")
    for ns in TEAMS:
        kubectl("apply", "-f", "-", input=cluster_and_topic(ns))
    for ns in TEAMS:
        wait(f"Cluster c Ready in {ns}", ready("clusters.oxbow.io", "c", ns), 240)
        wait(f"Topic t Ready in {ns}", ready("topics.oxbow.io", "t", ns), 120)

    for ns in TEAMS:
        other = next(o for o in TEAMS if o != ns)
        sa = f"system:serviceaccount:{ns}:{ns}-operator"
        own = run("kubectl", "auth", "can-i", "list", "clusters.oxbow.io", "-n", ns, "--as", sa, check=False).stdout
        theirs = run("kubectl", "auth", "can-i", "list", "clusters.oxbow.io", "-n", other, "--as", sa,
                     check=False).stdout
        every = run("kubectl", "auth", "can-i", "list", "clusters.oxbow.io", "-A", "--as", sa, check=False).stdout
        if (own.strip(), theirs.strip(), every.strip()) != ("yes", "no", "no"):
            fail(f"{sa} may list Clusters in {ns}: {own.strip()}, in {other}: {theirs.strip()}, "
                 f"everywhere: {every.strip()}; want yes, no, no")
        pods = kjson("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=oxbow-operator")["items"]
        if len(pods) != 1:
            fail(f"{len(pods)} operator pods in {ns}")
        pod = pods[0]
        name = pod["metadata"]["name"]
        c = pod["spec"]["containers"][0]
        probes = (c.get("livenessProbe", {}).get("httpGet", {}).get("path"),
                  c.get("readinessProbe", {}).get("httpGet", {}).get("path"))
        if probes != ("/livez", "/readyz"):
            fail(f"{name} probes {probes}")
        statuses = pod["status"].get("containerStatuses", [])
        if not statuses or not all(s["ready"] and s["restartCount"] == 0 for s in statuses):
            fail(f"{name} is not ready, or its liveness probe restarted it: {statuses}")
        if f"--namespace={ns}" not in c.get("args", []):
            fail(f"{name} args {c.get('args')}")
        pdb = kjson("get", "pdb", "-n", ns, f"{ns}-operator")
        if pdb["spec"].get("maxUnavailable") != 1:
            fail(f"PodDisruptionBudget {pdb['spec']}")
        # The Events on this namespace's Topic (created) come from this namespace's operator.
        reporters = {e.get("reportingInstance") for e in kjson("get", "events.events.k8s.io", "-n", ns)["items"]
                     if e.get("regarding", {}).get("kind") in ("Cluster", "Topic")}
        if reporters != {name}:
            fail(f"Events on Cluster c and Topic t in {ns} reported by {reporters}; want only {name}")

        def scraped():
            text = kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/pods/{name}:8080/proxy/metrics", check=False)
            counts = dict(re.findall(r'^oxbow_operator_reconciles_total\{controller="(\w+)",result="success"\} (\d+)$',
                                     text, re.M))
            return text if "oxbow_operator_leader 1" in text and int(counts.get("cluster", 0)) > 0 \
                and int(counts.get("topic", 0)) > 0 else None
        text = wait(f"{name}'s /metrics to count its reconciles", scraped, 60)
        lines = [line for line in text.splitlines() if line.startswith(("oxbow_operator_reconciles_total", "oxbow_operator_leader"))]
        step(f"{ns}: Cluster and Topic Ready; {name} probes /livez /readyz, PDB maxUnavailable 1, "
             f"may list Clusters only in {ns}; /metrics: {'; '.join(lines)}")

    collector_metrics("team-a")

    step("helm uninstall of both keeps the CRDs; deleting the namespaces leaves nothing stuck")
    for ns in TEAMS:
        kubectl("delete", "clusters.oxbow.io,topics.oxbow.io", "--all", "-n", ns, "--timeout=120s")
        run("helm", "uninstall", ns, "-n", ns, "--wait", "--timeout", "120s")
    left = {c["metadata"]["name"] for c in kjson("get", "crd")["items"]}
    if not set(CRDS) <= left:
        fail(f"CRDs after uninstalling both releases: {sorted(left)}")
    for ns in TEAMS:
        kubectl("delete", "namespace", ns, "--timeout=180s")


def samples(text, name, **labels):
    """Values of the Prometheus text lines of metric `name` whose labels include `labels`."""
    out = []
    for m in re.finditer(rf"^{name}(?:\{{(.*)\}})? (\S+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            out.append(float(m.group(2)))
    return out


def collector_metrics(ns):
    """The release's collector (observability.collector.enabled) receives the operator's and the
    brokers' metrics with no telemetry setting on the Cluster, and serves them in Prometheus
    format; the dashboards are ConfigMaps for Grafana's sidecar, byte for byte the shipped JSON."""
    step(f"{ns}: the operator and Cluster c's broker export to {ns}-collector, which serves them on :8889")
    env = {e["name"]: e.get("value") for e in
           kjson("get", "statefulset", "c-broker", "-n", ns)
           ["spec"]["template"]["spec"]["containers"][0].get("env", [])}
    want = f"http://{ns}-collector.{ns}.svc.cluster.local:4318"
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") != want or env.get("OTEL_METRIC_EXPORT_INTERVAL") != "5000":
        fail(f"Cluster c's brokers export to {env.get('OTEL_EXPORTER_OTLP_ENDPOINT')} every "
             f"{env.get('OTEL_METRIC_EXPORT_INTERVAL')} ms; want {want} every 5000 (the chart's collector)")
    if env.get("OTEL_TRACES_EXPORTER") != "none":
        fail(f"Cluster c's brokers would send traces to the chart's collector, which has no traces pipeline: {env}")

    # The operator's series carry its pod's name as `instance` (service.instance.id, set by the chart).
    operator = kjson("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=oxbow-operator")["items"][0]["metadata"]["name"]

    def exported():
        text = kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/services/{ns}-collector:prometheus/proxy/metrics",
                       check=False)
        got = {
            "active controller": samples(text, "oxbow_controller_active", job="oxbow-broker"),
            "partitions led": samples(text, "oxbow_broker_partitions", job="oxbow-broker", role="leader"),
            "cluster reconciles": samples(text, "oxbow_operator_reconciles_total", job="oxbow-operator",
                                          instance=operator, controller="cluster", result="success"),
            "topic reconciles": samples(text, "oxbow_operator_reconciles_total", job="oxbow-operator",
                                        instance=operator, controller="topic", result="success"),
            "broker pod": samples(text, "target_info", job="oxbow-broker", k8s_namespace_name=ns, oxbow_cluster="c"),
        }
        last[0] = got
        return got if all(got.values()) else None

    def as_wanted():
        # One broker, the active controller, leading topic t's two partitions (no other topic
        # exists). The broker exports every 5 s: what the collector serves may be from before
        # the partitions were led (0), so it is read again until it is as wanted.
        got = exported()
        return got if got and got["active controller"] == [1.0] and got["partitions led"] == [2.0] \
            and got["cluster reconciles"][0] >= 1 and got["topic reconciles"][0] >= 1 else None
    last = [None]
    got = wait(f"{ns}-collector to serve the broker's and the operator's metrics", exported, 150)
    deadline = time.monotonic() + 60
    while not (got := as_wanted()):
        if time.monotonic() > deadline:
            fail(f"{ns}-collector serves {last[0]} 60 s after it served every series; want one active "
                 f"controller, 2 partitions led, reconciles counted")
        time.sleep(1)
    step(f"{ns}-collector: {got}")

    maps = kjson("get", "configmaps", "-n", ns, "-l", "grafana_dashboard=1")["items"]
    shipped = {f: open(os.path.join(ROOT, "deploy", "observability", "dashboards", f)).read()
               for f in os.listdir(os.path.join(ROOT, "deploy", "observability", "dashboards")) if f.endswith(".json")}
    served = {k: v for m in maps for k, v in m.get("data", {}).items()}
    if served != shipped:
        fail(f"dashboard ConfigMaps in {ns} hold {sorted(served)}; want exactly the shipped {sorted(shipped)}")
    step(f"{ns}: {len(maps)} dashboard ConfigMaps labelled grafana_dashboard=1, each the shipped JSON")
    operator_dashboard(ns)


# What Grafana puts in place of the operator dashboard's variables (a 10 minute time range).
GRAFANA = {"$controller": ".*", "$__rate_interval": "1m", "$__range": "10m"}


def operator_dashboard(ns):
    """Every query of the operator's dashboard (deploy/observability/dashboards/oxbow-operator.json,
    which tests/observability cannot run: no operator runs there) returns data from a Prometheus
    (Debian's, on this host) scraping the release's collector, and the leader count is 1."""
    prometheus = shutil.which("prometheus")
    if not prometheus:
        fail("prometheus is missing: apt-get install prometheus (tests/run-all installs it)")
    pod = kjson("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=oxbow-collector")["items"][0]
    target = f"{pod['status']['podIP']}:8889"
    board = json.load(open(os.path.join(ROOT, "deploy", "observability", "dashboards", "oxbow-operator.json")))
    queries = [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]
    for v in (v for v in board["templating"]["list"] if v["type"] == "query"):
        metric, label = (x.strip() for x in v["query"][len("label_values("):-1].split(","))
        queries.append((f"variable {v['name']}", f"count by ({label}) ({metric})"))
    for var, value in GRAFANA.items():
        queries = [(title, expr.replace(var, value)) for title, expr in queries]
    if any("$" in expr for _, expr in queries):
        fail(f"a dashboard variable this test does not know in {queries}")
    step(f"Prometheus on the host scrapes {ns}-collector ({target}); the {len(queries)} queries of "
         f"{board['title']} must return data")
    with tempfile.TemporaryDirectory(prefix="oxbow-helm-prom-") as tmp:
        port = free_port()
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            yaml.safe_dump({"global": {"scrape_interval": "1s"},
                            "scrape_configs": [{"job_name": "oxbow-collector", "honor_labels": True,
                                                "static_configs": [{"targets": [target]}]}]}, f)
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        proc = subprocess.Popen([prometheus, f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            def query(expr):
                url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
                try:
                    with urllib.request.urlopen(url, timeout=10) as r:
                        return json.loads(r.read())["data"]["result"]
                except OSError:
                    return []

            def answered():
                got = {title: query(expr) for title, expr in queries}
                return got if all(got.values()) else None
            got = wait("every query of the operator dashboard to return data", answered, 120)
            leaders = float(got["Replicas reconciling"][0]["value"][1])
            controllers = {r["metric"].get("controller") for r in got["variable controller"]}
            if leaders != 1 or not {"cluster", "topic"} <= controllers:
                fail(f"the operator dashboard reads {leaders} replicas reconciling and controllers {controllers}; "
                     "want 1, and cluster and topic among them")
            step(f"{board['title']}: every query returned data; 1 replica reconciling; controllers {sorted(controllers)}")
            if os.environ.get("OXBOW_SCREENSHOTS"):  # tests/observability/screenshots --operator
                sys.path.insert(0, os.path.join(ROOT, "tests", "observability"))
                import graphs
                exprs = [expr for title, expr in queries if not title.startswith("variable ")]
                # Two minutes of scrapes, so that the rates over 1 minute draw lines, not a dot.
                step("two more minutes of scrapes for the screenshot")
                time.sleep(120)
                for png in graphs.render(f"http://127.0.0.1:{port}", "oxbow-operator", exprs,
                                         Path(os.environ["OXBOW_SCREENSHOTS"]), "3m"):
                    step(f"rendered {png}")
        finally:
            proc.terminate()
            proc.wait(10)
            log.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def every_value():
    defaults = yaml.safe_load(open(os.path.join(CHART, "values.yaml")))
    every = yaml.safe_load(open(EVERY))
    missing = [p for p in leaves(defaults) if eval_path(every, p) is None]
    if missing:
        fail(f"tests/k8s/helm-every-value.yaml does not set {sorted(missing)}")
    # A PodDisruptionBudget's only other setting is off, which renders nothing to check.
    same = sorted(p for p in leaves(defaults) - {"podDisruptionBudget.enabled"}
                  if eval_path(defaults, p) == eval_path(every, p))
    if same:
        fail(f"tests/k8s/helm-every-value.yaml sets {same} to their defaults")
    step("helm lint with the defaults and with every value set")
    run("helm", "lint", CHART)
    run("helm", "lint", CHART, "-f", EVERY, "-n", "helm-every")
    namespaces = ["helm-every", "helm-every-a", "helm-every-b", "helm-every-c"]
    for ns in namespaces:
        if not kubectl("get", "namespace", ns, check=False).strip():
            kubectl("create", "namespace", ns)
    rendered = run("helm", "template", "every", CHART, "-n", "helm-every", "-f", EVERY).stdout
    kinds = sorted({d["kind"] for d in yaml.safe_load_all(rendered) if d})
    applied = run("kubectl", "apply", "--dry-run=server", "-f", "-", input=rendered).stdout
    step(f"server-side dry run of every value: {len(applied.splitlines())} objects ({', '.join(kinds)}) accepted")
    for ns in namespaces:
        kubectl("delete", "namespace", ns, "--timeout=120s")


def eval_path(tree, path):
    for k in path.split("."):
        tree = tree.get(k) if isinstance(tree, dict) else None
    return tree


def main():
    step("no Cluster, Topic or User is left; the CRDs are removed so a release can own them")
    if kubectl("get", "namespace", QUICK_NS, check=False).strip():
        kubectl("delete", "namespace", QUICK_NS, "--timeout=180s")
    no_oxbow_resources()
    quickstart()
    no_oxbow_resources()
    two_releases()
    every_value()
    step("helm e2e passed")


if __name__ == "__main__":
    os.environ.setdefault("KUBECONFIG", "/var/lib/oxbow-k8s/kubeconfig")
    main()
