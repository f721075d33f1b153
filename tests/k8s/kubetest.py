"""Helpers shared by the tests that run against the test cluster (smoke.py, operator_e2e.py):
kubectl calls, waits with a deadline, and a failure report that dumps the test's namespaces."""

import json
import os
import subprocess
import sys
import time


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

    def broker_hosts(self, ns, cluster, path):
        """Maps each broker's cluster DNS name to its pod IP in a hosts file for the JVMs on the
        host (written whole and renamed: a JVM resolving meanwhile never reads half a file);
        returns the pod IPs."""
        pods = self.kjson("get", "pods", "-n", ns, "-l",
                          f"app.kubernetes.io/instance={cluster},app.kubernetes.io/component=broker")["items"]
        lines = [f"{p['status']['podIP']} {p['metadata']['name']}.{cluster}-brokers.{ns}.svc.cluster.local\n"
                 for p in pods if p["status"].get("podIP")]
        with open(path + ".new", "w") as f:
            f.writelines(lines)
        os.replace(path + ".new", path)
        return [p["status"]["podIP"] for p in pods if p["status"].get("podIP")]

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
