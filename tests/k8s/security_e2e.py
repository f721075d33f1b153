"""The security part of the operator end to end (run by operator_e2e.py, or alone against a test
cluster where the chart is installed: `python3 tests/k8s/security_e2e.py`):

  - a Cluster `secure` with listeners (SASL_SSL SCRAM-SHA-512 on 9092, mutual TLS on 9094) and
    authorization: the operator makes its CAs and the broker certificate, the brokers replicate
    over the mutual-TLS REPLICATION listener and run the quorum on TLS (broker 1 follows
    controller 0 over it), and the operator creates Topics through REPLICATION as a super user;
  - two external listeners, `nodeport` and `loadbalancer`: the brokers wait until the load
    balancers have addresses (the test hands them out, as a cloud's controller would), then kcat
    on this host, outside the cluster, bootstraps from `status.listeners`, sees each broker at its
    own external address, produces and consumes with the brokers' names verified (the broker
    certificate carries the node's and the load balancers' IPs); an address the certificate does
    not name is refused;
  - a `User` with SCRAM-SHA-512 (alice) and one with a client certificate (bob), each granted
    one topic: kcat inside the cluster produces to and consumes from the granted topic and is
    refused the other (Topic authorization failed), a wrong password is refused; Kafka's own
    kafka-topics from the host with alice's generated client.properties lists only her topic;
  - replacing the cluster CA's key (`oxbow.io/force-replace`): three steps (trust the new key,
    sign with it, trust only it), each a rolling restart; then every broker serves a certificate
    of the new key that the old CA certificate does not verify, alice is served with the bundle
    her Secret now holds, bob still is, and a client with only the old CA certificate is refused;
  - deleting alice revokes her: her Secret goes, her login fails;
  - renewing the cluster CA (the `oxbow.io/force-renew` annotation) re-issues the broker
    certificate, and every broker serves the new one without a restart (its Secret volume
    changes in place and the broker reloads it); clients holding the old CA certificate, and bob
    with his certificate from the untouched clients CA, keep working; no pod of either Cluster
    restarts and bob's certificate is not re-issued.
"""

import base64
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from bench import java_classpath  # noqa: E402

NAME = "secure"
BROKERS = 2
# Load balancer addresses the test hands out (on the node's loopback, as NODE_IP is).
LB_BASE = "172.30.0."


def cluster_yaml(ns):
    return json.dumps({
        "apiVersion": "oxbow.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": NAME, "namespace": ns},
        "spec": {
            "replicas": BROKERS,
            "controllers": {"replicas": 1},
            # Persistent: the key replacement restarts the brokers, and the single controller's
            # metadata log (users, ACLs, topics) must survive that.
            "storage": {"size": "1Gi"},
            "listeners": [
                {"name": "scram", "port": 9092, "tls": True, "authentication": {"type": "scram-sha-512"}},
                {"name": "mtls", "port": 9094, "tls": True, "authentication": {"type": "tls"}},
                {"name": "ext", "port": 9095, "tls": True, "authentication": {"type": "scram-sha-512"},
                 "type": "nodeport"},
                {"name": "lb", "port": 9096, "tls": True, "authentication": {"type": "scram-sha-512"},
                 "type": "loadbalancer"},
            ],
            "authorization": {},
            "config": {"offsets.topic.replication.factor": "2"},
        },
    })


def user_yaml(ns, name, auth, topic, extra_acls=()):
    acls = [{"resource": {"type": "topic", "name": topic}, "operations": ["Describe", "Read", "Write"]},
            {"resource": {"type": "group", "name": "*"}, "operations": ["Read"]}, *extra_acls]
    return json.dumps({
        "apiVersion": "oxbow.io/v1alpha1",
        "kind": "User",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"cluster": NAME, "authentication": {"type": auth}, "acls": acls},
    })


def topic_yaml(ns, name):
    return json.dumps({
        "apiVersion": "oxbow.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"cluster": NAME, "partitions": 1, "replicationFactor": BROKERS},
    })


def split_pem(text):
    blocks, cur = [], []
    for line in text.splitlines():
        cur.append(line)
        if line.startswith("-----END"):
            blocks.append("\n".join(cur) + "\n")
            cur = []
    return blocks


def key_of(pem):
    """The public key of a PEM certificate (a CA and its renewals share it)."""
    return subprocess.run(["openssl", "x509", "-noout", "-pubkey"], input=pem, capture_output=True,
                          text=True, check=True).stdout


def verifies(ip, port, ca_file):
    """Whether the certificate a broker serves verifies under `ca_file` alone."""
    p = subprocess.run(["openssl", "s_client", "-connect", f"{ip}:{port}", "-CAfile", ca_file,
                        "-verify_return_error"], input="", capture_output=True, text=True, timeout=30)
    # (9091 wants a client certificate too: the handshake may end in an alert after the client
    # verified the server, so the verdict is what s_client prints, not its exit status.)
    return "Verify return code: 0 (ok)" in p.stdout


def run_security(T, ns):
    run, kubectl, kjson, step, fail, wait = T.run, T.kubectl, T.kjson, T.step, T.fail, T.wait

    def condition(obj, type_):
        return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), {})

    def ready(kind, name):
        def check():
            o = kjson("get", kind, "-n", ns, name)
            return o if condition(o, "Ready").get("status") == "True" \
                and o["status"].get("observedGeneration") == o["metadata"]["generation"] else None
        return check

    def secret(name, key):
        data = kjson("get", "secret", "-n", ns, name)["data"]
        return base64.b64decode(data[key]).decode()

    def pods():
        """The secured Cluster's broker pods (another Cluster may share the namespace)."""
        return {p["metadata"]["name"]: p for p in
                kjson("get", "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={NAME}")["items"]}

    def restarts(ps):
        return {n: (p["metadata"]["uid"], sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])))
                for n, p in ps.items()}

    def put(path, text):
        # As an argument, not on stdin: `kubectl exec -i` lost a short stdin (a 241-byte key
        # arrived empty) here. PEM text holds no single quote.
        assert "'" not in text
        run("kubectl", "exec", "-n", ns, "client", "--", "sh", "-c", f"printf '%s' '{text}' > {path}")
        if kubectl("exec", "-n", ns, "client", "--", "cat", path) != text:
            fail(f"could not write {path} in the client pod")

    boot = f"{NAME}-bootstrap"

    def cluster_events():
        """Events about this Cluster object (not an earlier one of the same name)."""
        uid = kjson("get", "cluster", "-n", ns, NAME)["metadata"]["uid"]
        return [e for e in kjson("get", "events", "-n", ns)["items"]
                if (e.get("involvedObject") or e.get("regarding") or {}).get("uid") == uid]

    def kcat(args, auth, input=None, check=True):
        """kcat in the client pod as alice (SASL_SSL) or bob (mutual TLS)."""
        if auth == "alice":
            sec = ["-b", f"{boot}:9092", "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
                   "-X", "sasl.username=alice", "-X", f"sasl.password={alice_password}"]
        elif auth == "wrong":
            sec = ["-b", f"{boot}:9092", "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
                   "-X", "sasl.username=alice", "-X", "sasl.password=not-her-password"]
        else:
            sec = ["-b", f"{boot}:9094", "-X", "security.protocol=SSL", "-X", "ssl.certificate.location=/tmp/bob.crt",
                   "-X", "ssl.key.location=/tmp/bob.key"]
        p = run("kubectl", "exec", "-i", "-n", ns, "client", "--", "kcat", *sec, "-X", "ssl.ca.location=/tmp/ca.crt",
                "-m", "20", *args, input=input, check=False)
        if check and p.returncode != 0:
            fail(f"kcat {' '.join(args)} as {auth} failed ({p.returncode}): {p.stderr[-600:]}")
        return p

    produced = {}  # topic -> every record produced to it, in order

    def served(topic, auth):
        """Produces 20 records as `auth` and reads the topic back: None until both work."""
        n = produced.get(topic, "").count("\n")
        records = "".join(f"{topic}-{i}\n" for i in range(n, n + 20))
        if kcat(["-P", "-t", topic, "-X", "acks=all"], auth, input=records, check=False).returncode != 0:
            return None
        produced[topic] = produced.get(topic, "") + records
        got = kcat(["-C", "-t", topic, "-o", "beginning", "-e", "-q"], auth, check=False).stdout
        return got == produced[topic] or None

    def refused(topic, auth):
        p = kcat(["-P", "-t", topic, "-X", "acks=all", "-X", "message.timeout.ms=10000"], auth, input="x\n",
                 check=False)
        return p.returncode != 0 and "authorization failed" in p.stderr.lower(), p.stderr[-400:]

    step("a secured Cluster (SASL_SSL SCRAM and mutual-TLS listeners, external ones, ACLs) waits for its load balancers")
    kubectl("apply", "-f", "-", input=cluster_yaml(ns))

    def waiting_for_addresses():
        c = kjson("get", "cluster", "-n", ns, NAME)
        return condition(c, "Reconciling").get("reason") == "WaitingForAddresses" or None
    wait("Reconciling=WaitingForAddresses", waiting_for_addresses, 60)
    if pods():
        fail(f"broker pods started before their load balancers had addresses: {sorted(pods())}")
    # No cloud here: the test is the load balancer controller. It gives each LoadBalancer Service
    # an address on this node (as a cloud's would route to it), where kube-proxy forwards it.
    lb_ips = {f"{NAME}-lb-bootstrap": LB_BASE + "100", **{f"{NAME}-lb-{b}": LB_BASE + str(101 + b) for b in range(BROKERS)}}
    for svc, ip in lb_ips.items():
        run("ip", "addr", "replace", f"{ip}/32", "dev", "lo")
        kubectl("patch", "service", "-n", ns, svc, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}))
    c = wait(f"Cluster {NAME} Ready", ready("cluster", NAME), 300)
    if c["status"].get("bootstrapServers") != f"{boot}.{ns}.svc.cluster.local:9092":
        fail(f"bootstrapServers {c['status'].get('bootstrapServers')}")
    for s in (f"{NAME}-cluster-ca", f"{NAME}-clients-ca", f"{NAME}-broker-tls"):
        kjson("get", "secret", "-n", ns, s)
    props = kjson("get", "configmap", "-n", ns, f"{NAME}-config")["data"]["server.properties"]
    for line in ("listener.security.protocol.map=REPLICATION:SSL,CONTROLLER:SSL,SCRAM:SASL_SSL,MTLS:SSL,EXT:SASL_SSL,"
                 "LB:SASL_SSL", "config.providers=file",
                 "inter.broker.listener.name=REPLICATION", "listener.name.controller.ssl.client.auth=required",
                 "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        if line not in props.splitlines():
            fail(f"server.properties lacks {line}:\n{props}")

    step("Topics through REPLICATION (the operator's certificate), replicated over TLS")
    for t in ("granted", "denied"):
        kubectl("apply", "-f", "-", input=topic_yaml(ns, t))
    for t in ("granted", "denied"):
        wait(f"Topic {t} Ready", ready("topic", t), 120)

    step("Users: alice (SCRAM-SHA-512) granted `granted`, bob (client certificate) granted `denied`")
    kubectl("apply", "-f", "-", input=user_yaml(ns, "alice", "scram-sha-512", "granted"))
    kubectl("apply", "-f", "-", input=user_yaml(ns, "bob", "tls", "denied"))
    for u in ("alice", "bob"):
        wait(f"User {u} Ready", ready("user", u), 120)
    alice_password = secret("alice", "password")
    ca_before = secret("alice", "ca.crt")
    put("/tmp/ca.crt", ca_before)
    put("/tmp/bob.crt", secret("bob", "tls.crt"))
    put("/tmp/bob.key", secret("bob", "tls.key"))
    bob_cert = secret("bob", "tls.crt")

    # ACLs and credentials reach every broker through the metadata log: soon, not at once.
    wait("alice produces to and consumes `granted`", lambda: served("granted", "alice"), 60)
    ok, err = refused("denied", "alice")
    if not ok:
        fail(f"alice was not refused `denied`: {err}")
    wait("bob produces to and consumes `denied`", lambda: served("denied", "bob"), 60)
    ok, err = refused("granted", "bob")
    if not ok:
        fail(f"bob was not refused `granted`: {err}")
    p = kcat(["-L"], "wrong", check=False)
    if p.returncode == 0 or "authentication" not in p.stderr.lower():
        fail(f"a wrong password was not refused with an authentication error: {p.returncode} {p.stderr[-400:]}")
    step("alice and bob each reach their topic only; a wrong password is refused")

    step("from outside the Kubernetes cluster: the nodeport and loadbalancer listeners, hostnames verified")
    listeners = {l["name"]: l for l in kjson("get", "cluster", "-n", ns, NAME)["status"].get("listeners", [])}
    ca_file = os.path.join(tempfile.mkdtemp(), "ca.crt")
    with open(ca_file, "w") as f:
        f.write(ca_before)

    def outside(listener, args, input=None, bootstrap=None):
        """kcat on this host (outside the cluster) as alice, verifying the brokers' names."""
        return run("kcat", "-b", bootstrap or listeners[listener]["bootstrapServers"], "-X", "security.protocol=SASL_SSL",
                   "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
                   "-X", f"sasl.password={alice_password}", "-X", f"ssl.ca.location={ca_file}",
                   "-X", "ssl.endpoint.identification.algorithm=https", "-m", "20", *args, input=input, check=False)

    for listener, want_hosts in (("ext", None), ("lb", [lb_ips[f"{NAME}-lb-{b}"] for b in range(BROKERS)])):
        boot_servers = listeners.get(listener, {}).get("bootstrapServers", "")
        if not boot_servers:
            fail(f"status.listeners has no bootstrap address for {listener}: {listeners}")
        meta = outside(listener, ["-L", "-J"])
        if meta.returncode != 0:
            fail(f"kcat -L through {listener} ({boot_servers}) failed: {meta.stderr[-600:]}")
        brokers = sorted((b["id"], b["name"]) for b in json.loads(meta.stdout)["brokers"])
        hosts = [n.rsplit(":", 1)[0] for _, n in brokers]
        ports = {n.rsplit(":", 1)[1] for _, n in brokers}
        if listener == "ext" and (set(hosts) != {boot_servers.split(":")[0]} or len(ports) != BROKERS):
            fail(f"nodeport brokers should share the node's address with a node port each: {brokers}")
        if want_hosts is not None and hosts != want_hosts:
            fail(f"loadbalancer brokers advertise {brokers}, want hosts {want_hosts}")
        records = "".join(f"{listener}-{i}\n" for i in range(10))
        p = outside(listener, ["-P", "-t", "granted", "-X", "acks=all"], input=records)
        if p.returncode != 0:
            fail(f"producing through {listener} failed: {p.stderr[-600:]}")
        produced["granted"] += records
        got = outside(listener, ["-C", "-t", "granted", "-o", "beginning", "-e", "-q"]).stdout
        if got != produced["granted"]:
            fail(f"consuming through {listener} did not return what was produced: {got[-400:]!r}")
        step(f"{listener} ({boot_servers}): brokers {brokers}, 10 records produced and read back")
    # The same node port on 127.0.0.1 (kube-proxy serves node ports there too): an address the
    # broker certificate does not name, so the client refuses it.
    local = "127.0.0.1:" + listeners["ext"]["bootstrapServers"].split(",")[0].rsplit(":", 1)[1]
    p = outside("ext", ["-L"], bootstrap=local)
    if p.returncode == 0 or "certificate verify failed" not in p.stderr:
        fail(f"kcat through {local}, a name the certificate lacks, was not refused: {p.returncode} {p.stderr[-400:]}")
    step(f"through {local} (not in the certificate) the client refuses the broker: certificate verify failed")

    step("Kafka's kafka-topics with alice's generated client.properties lists only her topic")
    ips = {n: p["status"]["podIP"] for n, p in pods().items() if p["status"].get("podIP")}
    with tempfile.TemporaryDirectory() as d:
        hosts = os.path.join(d, "hosts")
        with open(hosts, "w") as f:
            for n, ip in sorted(ips.items()):
                f.write(f"{ip} {n}.{NAME}-brokers.{ns}.svc.cluster.local\n")
            f.write(f"{ips[f'{NAME}-broker-0']} {boot}.{ns}.svc.cluster.local\n")
        config = os.path.join(d, "client.properties")
        with open(config, "w") as f:
            f.write(secret("alice", "client.properties"))
        out = run("java", f"-Djdk.net.hosts.file={hosts}", "-Dlog4j.configuration=file:/dev/null", "-cp",
                  java_classpath(), "org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                  f"{boot}.{ns}.svc.cluster.local:9092", "--command-config", config, "--list").stdout.split()
    if out != ["granted"]:
        fail(f"kafka-topics --list as alice printed {out}, want only granted")

    step("renewing the cluster CA re-issues the broker certificate, served without any restart")
    before = restarts(pods())
    serial_before = subprocess.run(["openssl", "x509", "-noout", "-serial"], input=secret(f"{NAME}-broker-tls", "tls.crt"),
                                   capture_output=True, text=True).stdout.strip()
    kubectl("annotate", "secret", "-n", ns, f"{NAME}-cluster-ca", "oxbow.io/force-renew=e2e-1", "--overwrite")

    def reissued():
        s = subprocess.run(["openssl", "x509", "-noout", "-serial"], input=secret(f"{NAME}-broker-tls", "tls.crt"),
                           capture_output=True, text=True).stdout.strip()
        return s if s and s != serial_before else None

    serial_after = wait("a new broker certificate in its Secret", reissued, 90)
    bundle = secret(f"{NAME}-cluster-ca", "ca.crt")
    if bundle.count("BEGIN CERTIFICATE") != 2:
        fail(f"the CA bundle after renewal holds {bundle.count('BEGIN CERTIFICATE')} certificates, want 2")

    def serving(ip, port):
        p = subprocess.run(["sh", "-c", f"openssl s_client -connect {ip}:{port} </dev/null 2>/dev/null"
                                        " | openssl x509 -noout -serial"], capture_output=True, text=True)
        return p.stdout.strip()

    # The kubelet updates Secret volumes on its sync period (up to about a minute and a half).
    for n, ip in sorted(ips.items()):
        wait(f"{n} serving the new certificate on 9092 and on REPLICATION",
             lambda: serving(ip, 9092) == serial_after and serving(ip, 9091) == serial_after, 240)
    step(f"every broker serves {serial_after} (was {serial_before})")
    # Clients that trust only the old CA certificate keep working (same key), and so does bob,
    # whose clients CA did not change.
    wait("alice still served, trusting the old CA certificate", lambda: served("granted", "alice"), 60)
    wait("bob still served with his certificate", lambda: served("denied", "bob"), 60)
    if secret("bob", "tls.crt") != bob_cert:
        fail("renewing the cluster CA re-issued bob's certificate (the clients CA did not change)")
    after = restarts(pods())
    if after != before:
        fail(f"renewing the CA restarted pods: before {before}, after {after}")
    events = [e for e in cluster_events() if e.get("reason") == "RestartingBroker"]
    if events:
        fail(f"restart events for {NAME}: {[e.get('note') for e in events]}")

    step("replacing the cluster CA's key (oxbow.io/force-replace): trust the new key, sign with it, drop the old")
    old_ca = secret(f"{NAME}-cluster-ca", "tls.crt")
    old_key = key_of(old_ca)
    before = {n: p["metadata"]["uid"] for n, p in pods().items()}
    kubectl("annotate", "secret", "-n", ns, f"{NAME}-cluster-ca", "oxbow.io/force-replace=e2e-1", "--overwrite")

    def replaced():
        data = kjson("get", "secret", "-n", ns, f"{NAME}-cluster-ca")["data"]
        bundle = base64.b64decode(data["ca.crt"]).decode()
        keys = {key_of(c) for c in split_pem(bundle)}
        return "next.crt" not in data and len(keys) == 1 and old_key not in keys or None
    # Three steps, each a rolling restart of both brokers (the metadata quorum reads its
    # certificates at startup).
    wait("the key replaced: the bundle trusts only a new key", replaced, 1200)

    def settled():
        # The last step's roll done: no key generation on the pod template any more, and every
        # broker pod itself on the StatefulSet's latest revision and Ready (a Ready seen between
        # two steps' rolls is not the end; and the Cluster's status may predate the template
        # change its own reconcile just made), then the Cluster Ready with every broker current.
        sts = kjson("get", "statefulset", "-n", ns, f"{NAME}-broker")
        if "oxbow.io/ca-keys" in (sts["spec"]["template"]["metadata"].get("annotations") or {}):
            return None
        st = sts.get("status") or {}
        if st.get("observedGeneration") != sts["metadata"]["generation"]:
            return None
        brokers = [p for n, p in pods().items() if n.startswith(f"{NAME}-broker-")]
        if len(brokers) != sts["spec"]["replicas"] or not all(
                p["metadata"].get("labels", {}).get("controller-revision-hash") == st.get("updateRevision")
                and not p["metadata"].get("deletionTimestamp")
                and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
                for p in brokers):
            return None
        o = ready("cluster", NAME)()
        return o if o and all(b.get("upToDate") for b in o["status"].get("brokers", [])) else None
    c = wait(f"Cluster {NAME} settled after the key replacement", settled, 600)
    new_ca = secret(f"{NAME}-cluster-ca", "tls.crt")
    notes = [e.get("note") or e.get("message", "") for e in cluster_events()
             if e.get("reason", "").startswith("CertificateAuthorityKeyReplac")]
    for n in ("step 1 of 3", "step 2 of 3", "step 3 of 3"):
        if not any(n in x and f"{NAME}-cluster-ca" in x for x in notes):
            fail(f"no event for {n} of the key replacement: {notes}")
    after = {n: p["metadata"]["uid"] for n, p in pods().items()}
    if any(before.get(n) == u for n, u in after.items()):
        fail(f"a broker was not restarted by the key replacement: before {before}, after {after}")
    with tempfile.TemporaryDirectory() as d:
        new_file, old_file = os.path.join(d, "new.crt"), os.path.join(d, "old.crt")
        with open(new_file, "w") as f:
            f.write(new_ca)
        with open(old_file, "w") as f:
            f.write(old_ca)
        for n, p in sorted(pods().items()):
            ip = p["status"]["podIP"]
            for port in (9092, 9091):
                if not verifies(ip, port, new_file):
                    fail(f"{n}:{port} does not serve a certificate of the new key")
                if verifies(ip, port, old_file):
                    fail(f"{n}:{port} still serves a certificate the old key verifies")
    step("every broker serves a certificate of the new key, none the old key verifies")
    # alice takes the new bundle from her Secret (the User controller updated it); a client
    # holding only the old CA certificate is refused; bob's clients CA did not change.
    put("/tmp/ca.crt", secret("alice", "ca.crt"))
    wait("alice served with her Secret's new ca.crt", lambda: served("granted", "alice"), 120)
    wait("bob still served with his certificate", lambda: served("denied", "bob"), 60)
    put("/tmp/ca.crt", old_ca)
    p = kcat(["-L"], "alice", check=False)
    if p.returncode == 0 or "certificate verify failed" not in p.stderr:
        fail(f"a client trusting only the old CA key was not refused: {p.returncode} {p.stderr[-400:]}")
    put("/tmp/ca.crt", secret("alice", "ca.crt"))
    step("alice and bob served after the key replacement; the old CA certificate alone is refused")

    step("replacing the clients CA's key (no restart: client listeners reload it): bob gets a certificate of the new key")
    old_clients_key = key_of(secret(f"{NAME}-clients-ca", "tls.crt"))
    old_bob = (secret("bob", "tls.crt"), secret("bob", "tls.key"))
    before = restarts(pods())
    kubectl("annotate", "secret", "-n", ns, f"{NAME}-clients-ca", "oxbow.io/force-replace=e2e-1", "--overwrite")

    def clients_replaced():
        data = kjson("get", "secret", "-n", ns, f"{NAME}-clients-ca")["data"]
        keys = {key_of(c) for c in split_pem(base64.b64decode(data["ca.crt"]).decode())}
        return "next.crt" not in data and len(keys) == 1 and old_clients_key not in keys or None
    wait("the clients CA key replaced", clients_replaced, 1200)
    wait(f"Cluster {NAME} Ready after the clients CA key replacement", ready("cluster", NAME), 600)
    # The last step waited for bob's Secret to hold a certificate of the new key.
    with tempfile.TemporaryDirectory() as d:
        ca_path, bob_path = os.path.join(d, "ca.crt"), os.path.join(d, "bob.crt")
        with open(ca_path, "w") as f:
            f.write(secret(f"{NAME}-clients-ca", "ca.crt"))
        with open(bob_path, "w") as f:
            f.write(secret("bob", "tls.crt"))
        v = subprocess.run(["openssl", "verify", "-CAfile", ca_path, bob_path], capture_output=True, text=True)
        if v.returncode != 0:
            fail(f"bob's certificate does not verify under the new clients CA: {v.stdout} {v.stderr}")
    put("/tmp/bob.crt", secret("bob", "tls.crt"))
    put("/tmp/bob.key", secret("bob", "tls.key"))
    wait("bob served with his new certificate", lambda: served("denied", "bob"), 120)
    put("/tmp/bob.crt", old_bob[0])
    put("/tmp/bob.key", old_bob[1])
    # The brokers reload the bundle once the kubelet has updated their Secret volume.
    wait("bob's certificate from the old clients CA key refused", lambda: kcat(["-L"], "bob", check=False).returncode != 0,
         240)
    put("/tmp/bob.crt", secret("bob", "tls.crt"))
    put("/tmp/bob.key", secret("bob", "tls.key"))
    wait("alice still served", lambda: served("granted", "alice"), 60)
    # Only client listeners use the clients CA, and brokers reload it from disk: no restart.
    if restarts(pods()) != before:
        fail(f"replacing the clients CA key restarted brokers: before {before}, after {restarts(pods())}")
    step("bob served with his re-issued certificate, his old one refused, alice unaffected, no restart")

    step("deleting alice revokes her: her Secret goes and her login fails")
    kubectl("delete", "user", "-n", ns, "alice", "--timeout=60s")
    wait("alice's Secret deleted", lambda: not kubectl("get", "secret", "-n", ns, "alice", "--ignore-not-found").strip(), 60)

    def revoked():
        p = kcat(["-L"], "alice", check=False)
        return p.returncode != 0 and "authentication" in p.stderr.lower()
    wait("alice's login refused", revoked, 60)
    step("secured Cluster passed")


if __name__ == "__main__":
    from kubetest import Suite
    os.environ.setdefault("KUBECONFIG", "/var/lib/oxbow-k8s/kubeconfig")
    ns = os.environ.get("NS", "oxbow-secure")
    suite = Suite("security-e2e", [ns])
    if not suite.kubectl("get", "namespace", ns, check=False).strip():
        suite.kubectl("create", "namespace", ns)
    if not suite.kubectl("get", "pod", "-n", ns, "client", "--ignore-not-found").strip():
        suite.kubectl("run", "client", "-n", ns, "--image=localhost/oxbow/toolbox:dev", "--restart=Never",
                      "--command", "--", "sleep", "100000")
        suite.wait("client pod", lambda: suite.kjson("get", "pod", "-n", ns, "client")["status"].get("phase")
                   == "Running", 90)
    run_security(suite, ns)
