"""Helpers shared by the tests that run against the test cluster (smoke.py, operator_e2e.py):
kubectl calls, waits with a deadline, a failure report that dumps the test's namespaces, and
the Java load producer the operator e2e's rolls and moves run under."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRODUCE_JAVA = os.path.join(ROOT, "tests", "clients", "java", "Produce.java")
PRODUCER_LOG4J = os.path.join(ROOT, "tests", "k8s", "load-producer-log4j.properties")
# Broker log lines that tell what happened to an idempotent producer's writes.
REFUSALS = ("produce refused", "truncating", "leader change", "fetch answer")


class Suite:
    def __init__(self, name, namespaces, extra_dumps=()):
        self.name = name
        self.namespaces = namespaces
        self.extra_dumps = list(extra_dumps)

    def run(self, *cmd, check=True, input=None):
        p = subprocess.run(list(cmd), capture_output=True, text=True, input=input)
        if check and p.returncode != 0:
            self.fail(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        return p

    def kubectl(self, *args, check=True, input=None):
        return self.run("kubectl", *args, check=check, input=input).stdout

    def kjson(self, *args):
        return json.loads(self.kubectl(*args, "-o", "json"))

    def step(self, msg):
        print(f"[{self.name} {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def fail(self, msg):
        print(f"[{self.name}] FAILED: {msg}", flush=True)
        dumps = [["get", "oxbow,all,pvc,pv", "-n", ns, "-o", "wide"] for ns in self.namespaces]
        dumps += [["get", "events", "-n", ns] for ns in self.namespaces]
        for cmd in dumps + self.extra_dumps:
            print(subprocess.run(["kubectl", *cmd], capture_output=True, text=True).stdout, flush=True)
        # Again after the dumps, so that the end of the output says what failed.
        print(f"[{self.name}] FAILED (see the dumps above): {msg}", flush=True)
        sys.exit(1)

    def broker_pods(self, ns, cluster):
        """The Cluster's broker pods, as the API server lists them."""
        return self.kjson("get", "pods", "-n", ns, "-l",
                          f"app.kubernetes.io/instance={cluster},app.kubernetes.io/component=broker")["items"]

    def broker_hosts(self, ns, cluster, path):
        """Maps each broker's cluster DNS name to its pod IP, and the Cluster's bootstrap
        Service's name to its ClusterIP (kube-proxy routes it from the host too), in a hosts file
        for the JVMs on the host (written whole and renamed: a JVM resolving meanwhile never
        reads half a file); returns the bootstrap address, `<cluster>-bootstrap.<ns>.svc...:9092`.

        Clients on the host bootstrap through that Service, as clients in a real deployment do,
        never through pod IPs: a roll gives every pod a new IP, and a Kafka 4 client that finds
        every broker it knows unreachable at once (a JVM caches a name's old IP for 30 s) goes
        back to its bootstrap addresses (metadata.recovery.strategy=rebootstrap), which must
        still lead to a broker."""
        pods = self.broker_pods(ns, cluster)
        lines = [f"{p['status']['podIP']} {p['metadata']['name']}.{cluster}-brokers.{ns}.svc.cluster.local\n"
                 for p in pods if p["status"].get("podIP")]
        bootstrap = f"{cluster}-bootstrap.{ns}.svc.cluster.local"
        # Read each time, not once: a Cluster deleted and created again gets a new Service and IP.
        lines.append(f"{self.kjson('get', 'service', '-n', ns, f'{cluster}-bootstrap')['spec']['clusterIP']} "
                     f"{bootstrap}\n")
        with open(path + ".new", "w") as f:
            f.writelines(lines)
        os.replace(path + ".new", path)
        return f"{bootstrap}:9092"

    def broker_log_lines(self, ns, cluster, needles, last=30):
        """The last `last` lines of each broker's log that contain one of `needles`, for failure
        reports."""
        pods = self.broker_pods(ns, cluster)
        out = []
        for p in pods:
            name = p["metadata"]["name"]
            logs = self.kubectl("logs", "-n", ns, name, "--tail=20000", check=False)
            lines = [line for line in logs.splitlines() if any(n in line for n in needles)]
            out.append(f"\n--- {name}: {len(lines)} lines with {' or '.join(map(repr, needles))}, the last {last}:\n"
                       + "\n".join(lines[-last:]))
        return "".join(out)

    def wait(self, what, pred, timeout=180):
        """Polls pred() until it returns something truthy, which is returned."""
        deadline = time.monotonic() + timeout
        while True:
            got = pred()
            if got:
                return got
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout}s waiting for {what}")
            time.sleep(1)

    def wait_equal(self, what, get, want, timeout):
        deadline = time.monotonic() + timeout
        while (got := get()) != want:
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout}s waiting for {what}: got {got}, want {want}")
            time.sleep(1)


class LoadProducer:
    """Kafka's Java producer on the host (tests/clients/java/Produce.java: idempotent, acks=all,
    delivery.timeout.ms 300 s) writing numbered records PREFIX<n> to `topic` until finish(). Its
    log (the client's warnings, its sequence and epoch bookkeeping, a progress line every 10 s)
    is kept, and every failure shows it, with `diagnostics()` (the caller's view of the cluster)."""

    DELIVERY_TIMEOUT_S = 300

    def __init__(self, suite, classpath, hosts, bootstrap, topic, prefix, per_second):
        self.T = suite
        self.dir = tempfile.mkdtemp(prefix=f"oxbow-{suite.name}-load")
        self.acked_file, self.stop_file = os.path.join(self.dir, "acked"), os.path.join(self.dir, "stop")
        self.log = open(os.path.join(self.dir, "producer.log"), "w+")
        self.proc = subprocess.Popen(
            ["java", f"-Djdk.net.hosts.file={hosts}", f"-Dlog4j.configuration=file:{PRODUCER_LOG4J}", "-cp",
             classpath, PRODUCE_JAVA, bootstrap, topic, prefix, self.acked_file, self.stop_file, str(per_second)],
            stdout=subprocess.PIPE, stderr=self.log, text=True)

    def log_text(self, head=40, tail=80):
        self.log.flush()
        with open(self.log.name) as f:
            lines = f.readlines()
        if len(lines) > head + tail:
            lines = lines[:head] + [f"... ({len(lines) - head - tail} lines)\n"] + lines[-tail:]
        return "".join(lines)

    def finish(self, diagnostics=lambda: ""):
        """Stops the producer; returns (its summary, the set of acknowledged values). Fails the
        suite if it does not finish (then with its threads' stacks), fails or had nothing acked."""
        open(self.stop_file, "w").close()
        # Past the delivery timeout, so that a stalled record ends as a failure the summary names.
        try:
            out, _ = self.proc.communicate(timeout=self.DELIVERY_TIMEOUT_S + 120)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGQUIT)  # the JVM prints every thread's stack to stdout
            time.sleep(2)
            self.proc.kill()
            out, _ = self.proc.communicate()
            # The application's thread and the client's sender, of every thread's stack.
            stacks = [b for b in out.split("\n\n") if b.startswith(('"main"', '"kafka-producer'))]
            self.T.fail(f"the load producer had not finished {self.DELIVERY_TIMEOUT_S + 120} s after it was "
                        f"stopped; its log:\n{self.log_text()}\nits main and sender threads:\n"
                        + "\n\n".join(stacks)[:8000] + diagnostics())
        if self.proc.returncode != 0:
            self.T.fail(f"the load producer failed ({self.proc.returncode}); its log:\n{self.log_text()}"
                        f"{diagnostics()}")
        summary = json.loads(out.strip().splitlines()[-1])
        with open(self.acked_file) as f:
            acked = set(f.read().split())
        if not acked or summary["failed"]:
            self.T.fail(f"load producer: {summary}\nits log:\n{self.log_text()}{diagnostics()}")
        return summary, acked
