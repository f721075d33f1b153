#!/usr/bin/env python3
"""Dynamic provisioner of `local` PersistentVolumes for the test cluster (tests/k8s/up).

Serves every StorageClass whose provisioner is PROVISIONER (tests/k8s/manifests/storage.yaml:
`standard`, WaitForFirstConsumer). Once a second it lists claims, volumes and classes from the
API server, and:
  - provisions: a Pending claim of one of those classes, for which the PV controller asks for a
    volume (annotation volume.kubernetes.io/storage-provisioner) and the scheduler has picked this
    node (volume.kubernetes.io/selected-node), gets a directory ROOT/pvc-<claim uid> (root-owned,
    0755) and a PersistentVolume of the same name: spec.local.path on that directory, node
    affinity on kubernetes.io/hostname, the claim's request and access modes, a claimRef with the
    claim's uid (the PV controller then binds the two) and the class's reclaim policy. The name
    follows from the claim's uid, so a restart, a retry or a second instance never makes two
    volumes for one claim: the API server refuses the second create;
  - deletes: a volume of ours in phase Released with reclaim policy Delete loses its directory,
    then is deleted;
  - sweeps: a directory under ROOT with neither a volume nor a claim behind it (a claim deleted
    between our mkdir and create, a volume deleted by hand) is removed once a minute old;
  - resizes, as a CSI external-resizer does for a driver with no node-side step (a directory has
    no file system to grow; storage.yaml's class has allowVolumeExpansion): a Bound claim on a
    volume of ours whose spec.resources.requests.storage is above its status.capacity.storage is
    marked in progress (status: condition Resizing, allocatedResourceStatuses.storage
    ControllerResizeInProgress, allocatedResources.storage the new size), the volume's
    spec.capacity.storage is set to the new size, then the claim's status.capacity.storage too,
    its resize conditions (Resizing, FileSystemResizePending, *ResizeError) dropped and
    allocatedResourceStatuses.storage removed (allocatedResources keeps the size), with the
    events Resizing and VolumeResizeSuccessful on the claim. Online: pods keep running. The
    kubelet then finds the claim already at the volume's size and does nothing (its recovery path
    needs allocatedResources). kube-controller-manager's expand controller cannot expand a `local`
    volume: it only records a Normal event ExternalExpanding ("waiting for an external controller
    to expand this PVC") and writes nothing (no volume.kubernetes.io/storage-resizer annotation:
    that is for CSI-migrated in-tree volumes), so the two do not compete. Shrinking is refused by
    the API server. Sizes are compared as quantities (Ki, Mi, Gi, k, M, G, plain bytes, ...).
`local` volumes, unlike hostPath ones, get a pod's fsGroup applied by the kubelet (it chowns the
directory to the group and makes it group-writable on the first mount), as CSI volumes do, so
pods running as non-root under PodSecurity `restricted` can write them.

One log line per action on stdout; API and file system errors are logged (once until they
change) and retried on the next pass, never fatal. Python standard library only; it talks to the
API server with a client certificate (storage.yaml binds it the ClusterRole
system:persistent-volume-provisioner, and one of its own for resizing: patch on volumes and on
claims' status).
"""

import argparse
import http.client
import json
import os
import re
import shutil
import ssl
import sys
import time
import urllib.parse
from fractions import Fraction

PROVISIONER = "test.oxbow.io/local"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_STORAGE_PROVISIONER = ("volume.kubernetes.io/storage-provisioner",
                           "volume.beta.kubernetes.io/storage-provisioner")
ORPHAN_AGE = 60  # seconds a directory without a volume or claim is left alone
# The claim conditions a resize sets (pkg/volume/util/resize_util.go knownResizeConditions): all
# dropped when it is over.
RESIZE_CONDITIONS = {"Resizing", "FileSystemResizePending", "ControllerResizeError", "NodeResizeError"}
EVENT_SOURCE = f"external-resizer {PROVISIONER}"


def log(msg):
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {msg}", flush=True)


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    """A minimal client: one kept-alive HTTPS connection, JSON in and out."""

    def __init__(self, server, ca, cert, key):
        u = urllib.parse.urlsplit(server)
        self.host, self.port = u.hostname, u.port or 443
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(cert, key)
        self.conn = None

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json", "User-Agent": "oxbow-local-provisioner"}
        if data is not None:
            # PATCH: a JSON merge patch (RFC 7386): maps merge, lists and values are replaced.
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=15)
        try:
            self.conn.request(method, path, body=data, headers=headers)
            resp = self.conn.getresponse()
            raw = resp.read()
        except Exception:
            self.conn.close()
            self.conn = None
            raise
        if resp.status >= 300:
            raise ApiError(resp.status, raw.decode(errors="replace"))
        return json.loads(raw) if raw else {}


class Provisioner:
    def __init__(self, api, root, node):
        self.api, self.root, self.node = api, root, node
        self.classes = None  # names of the classes we serve, as last logged
        self.said = {}  # key -> the last message logged for it, to log each condition once

    def once(self, key, msg):
        """Logs msg unless it is what was last logged under key."""
        if self.said.get(key) != msg:
            self.said[key] = msg
            log(msg)

    def forget(self, key):
        self.said.pop(key, None)

    def pass_(self):
        classes = {(c.get("metadata") or {}).get("name"): c
                   for c in self.api.call("GET", "/apis/storage.k8s.io/v1/storageclasses")["items"]
                   if c.get("provisioner") == PROVISIONER}
        if sorted(classes) != self.classes:
            self.classes = sorted(classes)
            log(f"serving StorageClasses: {', '.join(self.classes) or '(none yet)'}")
        pvs = self.api.call("GET", "/api/v1/persistentvolumes")["items"]
        claims = self.api.call("GET", "/api/v1/persistentvolumeclaims")["items"]
        pv_by_claim = {((pv.get("spec") or {}).get("claimRef") or {}).get("uid"): pv for pv in pvs}
        for claim in claims:
            self.guard(f"claim {claim_name(claim)}", self.maybe_provision, claim, classes, pv_by_claim)
        pv_by_name = {(pv.get("metadata") or {}).get("name"): pv for pv in pvs}
        for claim in claims:
            self.guard(f"resize {claim_name(claim)}", self.maybe_resize, claim, pv_by_name)
        for pv in pvs:
            self.guard(f"volume {(pv.get('metadata') or {}).get('name')}", self.maybe_delete, pv)
        self.guard("sweep", self.sweep, {(pv.get("metadata") or {}).get("name") for pv in pvs},
                   {(c.get("metadata") or {}).get("uid") for c in claims})

    def guard(self, what, fn, *args):
        """Runs one action; an error in it is logged and does not stop the others."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - anything: log it, try again next pass
            self.once(("error", what), f"error: {what}: {type(e).__name__}: {e}")

    def maybe_provision(self, claim, classes, pv_by_claim):
        meta, spec = claim["metadata"], claim.get("spec") or {}
        uid, name = meta.get("uid"), claim_name(claim)
        ann = meta.get("annotations") or {}
        cls = classes.get(spec.get("storageClassName"))
        if (cls is None or (claim.get("status") or {}).get("phase") != "Pending" or spec.get("volumeName")
                or meta.get("deletionTimestamp") or not uid):
            return
        if not any(ann.get(k) == PROVISIONER for k in ANN_STORAGE_PROVISIONER):
            return  # the PV controller has not asked for a volume (yet)
        node = ann.get(ANN_SELECTED_NODE)
        if not node:
            return  # WaitForFirstConsumer: no pod scheduled yet
        if uid in pv_by_claim:
            return  # provisioned already; the PV controller binds it
        if node != self.node:
            self.once(("skip", uid), f"skip {name}: selected node {node} is not ours ({self.node})")
            return
        why = unsupported(spec)
        if why:
            self.once(("skip", uid), f"skip {name}: {why}")
            return
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        if not size:
            self.once(("skip", uid), f"skip {name}: no storage request")
            return
        pv_name = f"pvc-{uid}"
        path = os.path.join(self.root, pv_name)
        os.makedirs(self.root, mode=0o755, exist_ok=True)
        try:
            os.mkdir(path)
            os.chmod(path, 0o755)  # whatever the umask; the pod's fsGroup makes it writable
        except FileExistsError:
            # An earlier attempt's, or (from a stale list) a volume's a pod already uses: its
            # mode may be the kubelet's fsGroup one now, which must stay.
            pass
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "annotations": {ANN_PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": cls.get("reclaimPolicy") or "Delete",
                "storageClassName": cls["metadata"]["name"],
                "volumeMode": "Filesystem",
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "namespace": meta["namespace"], "name": meta["name"], "uid": uid},
                "local": {"path": path},
                # The kubelet labels its node kubernetes.io/hostname=<its --hostname-override>,
                # which is also the node's name on this cluster (no cloud provider).
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
            },
        }
        if cls.get("mountOptions"):
            pv["spec"]["mountOptions"] = cls["mountOptions"]
        try:
            self.api.call("POST", "/api/v1/persistentvolumes", pv)
        except ApiError as e:
            if e.status != 409:
                raise
            self.once(("exists", uid), f"volume {pv_name} for {name} exists already")
            return
        self.forget(("error", f"claim {name}"))
        log(f"provisioned {pv_name} for {name}: {size} {','.join(pv['spec']['accessModes'])} "
            f"on {node} at {path}")

    def maybe_resize(self, claim, pv_by_name):
        meta, spec, status = claim["metadata"], claim.get("spec") or {}, claim.get("status") or {}
        name = claim_name(claim)
        pv = pv_by_name.get(spec.get("volumeName"))
        if (status.get("phase") != "Bound" or pv is None or meta.get("deletionTimestamp")
                or (pv["metadata"].get("annotations") or {}).get(ANN_PROVISIONED_BY) != PROVISIONER):
            return
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if ref.get("uid") != meta.get("uid") or ref.get("namespace") != meta.get("namespace"):
            return  # not (yet) bound to this claim
        want = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        have = (status.get("capacity") or {}).get("storage")
        if not want or not have or quantity(want) <= quantity(have):
            return
        pv_name = pv["metadata"]["name"]
        ns = urllib.parse.quote(meta["namespace"])
        status_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{urllib.parse.quote(meta['name'])}/status"
        others = [c for c in status.get("conditions") or [] if c.get("type") not in RESIZE_CONDITIONS]
        # 1. In progress, unless a pass that stopped short (a restart) marked it already. The
        # resourceVersion makes each status patch conditional: a claim changed since our list gets
        # a 409, and is taken up again on the next pass.
        if ((status.get("allocatedResourceStatuses") or {}).get("storage") != "ControllerResizeInProgress"
                or quantity((status.get("allocatedResources") or {}).get("storage") or "0") != quantity(want)):
            claim = self.api.call("PATCH", status_path, {
                "metadata": {"resourceVersion": meta["resourceVersion"]},
                "status": {
                    "conditions": others + [{"type": "Resizing", "status": "True", "lastTransitionTime": now()}],
                    "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
                    "allocatedResources": {"storage": want},
                }})
            self.event(claim, "Normal", "Resizing", f"External resizer is resizing volume {pv_name}")
        # 2. The volume: a directory, so nothing to grow but the number.
        if quantity(((pv.get("spec") or {}).get("capacity") or {}).get("storage") or "0") < quantity(want):
            self.api.call("PATCH", f"/api/v1/persistentvolumes/{urllib.parse.quote(pv_name)}",
                          {"spec": {"capacity": {"storage": want}}})
        # 3. Done (the external-resizer's markOverallExpansionAsFinished): no node expansion.
        claim = self.api.call("PATCH", status_path, {
            "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
            "status": {
                "capacity": {"storage": want},
                "conditions": others,
                "allocatedResourceStatuses": {"storage": None},
            }})
        self.event(claim, "Normal", "VolumeResizeSuccessful", "Resize volume succeeded")
        self.forget(("error", f"resize {name}"))
        log(f"resized {pv_name} for {name}: {have} -> {want}")

    def event(self, claim, type_, reason, message):
        """Records an event on a claim, as the external-resizer does; a failure is only logged."""
        meta = claim["metadata"]
        ts = now()
        try:
            self.api.call("POST", f"/api/v1/namespaces/{urllib.parse.quote(meta['namespace'])}/events", {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                   "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"],
                                   "resourceVersion": meta.get("resourceVersion")},
                "type": type_, "reason": reason, "message": message, "source": {"component": EVENT_SOURCE},
                "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
            })
            self.forget(("event", meta["uid"]))
        except Exception as e:  # noqa: BLE001 - an event is worth a log line, not a retry
            self.once(("event", meta["uid"]), f"error: event {reason} on {claim_name(claim)}: {type(e).__name__}: {e}")

    def maybe_delete(self, pv):
        meta, spec = pv["metadata"], pv.get("spec") or {}
        if ((meta.get("annotations") or {}).get(ANN_PROVISIONED_BY) != PROVISIONER
                or (pv.get("status") or {}).get("phase") != "Released"
                or spec.get("persistentVolumeReclaimPolicy") != "Delete" or meta.get("deletionTimestamp")):
            return
        name = meta["name"]
        path = os.path.join(self.root, name)
        local = (spec.get("local") or {}).get("path")
        if local != path:
            self.once(("skip", name), f"skip deleting {name}: its path {local} is not {path}")
            return
        removed = os.path.isdir(path)
        if removed:
            shutil.rmtree(path)
        try:
            self.api.call("DELETE", f"/api/v1/persistentvolumes/{urllib.parse.quote(name)}",
                          {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta["uid"]}})
        except ApiError as e:
            if e.status != 404:
                raise
        ref = spec.get("claimRef") or {}
        self.forget(("error", f"volume {name}"))
        log(f"deleted {name} (claim {ref.get('namespace')}/{ref.get('name')} released)"
            f"{', removed ' + path if removed else ', its directory was gone'}")

    def sweep(self, pv_names, claim_uids):
        if not os.path.isdir(self.root):
            return
        now = time.time()
        for entry in os.scandir(self.root):
            if not entry.name.startswith("pvc-") or entry.name in pv_names or entry.name[4:] in claim_uids:
                continue
            if now - entry.stat(follow_symlinks=False).st_mtime < ORPHAN_AGE:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            log(f"removed {entry.path}: no volume or claim refers to it")


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# A resource.Quantity: a decimal number, then a binary suffix (Ki = 2^10 ... Ei), a decimal one
# (n, u, m, k, M, G, T, P, E) or a decimal exponent (1e9, 1E3); no suffix is plain bytes.
QUANTITY = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)")
SUFFIX = {"": 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3),
          "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(s):
    """The exact value of a Kubernetes quantity ("1Gi", "1073741824", "1.5G", "1e9"), a Fraction."""
    m = QUANTITY.fullmatch(str(s).strip())
    if not m:
        raise ValueError(f"not a quantity: {s!r}")
    if m.group(2) is not None:
        return Fraction(m.group(1)) * Fraction(10) ** int(m.group(2))
    return Fraction(m.group(1)) * SUFFIX[m.group(3) or ""]


def claim_name(claim):
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def unsupported(spec):
    """Why a claim cannot be served by a directory, or None."""
    if spec.get("volumeMode") == "Block":
        return "volumeMode Block (only directories here)"
    if spec.get("selector"):
        return "claims with a selector are not provisioned dynamically"
    if spec.get("dataSource") or spec.get("dataSourceRef"):
        return "data sources (clones, snapshots) are not supported"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="API server URL, https://HOST:PORT")
    ap.add_argument("--ca", required=True, help="CA certificate of the API server")
    ap.add_argument("--cert", required=True, help="client certificate")
    ap.add_argument("--key", required=True, help="client key")
    ap.add_argument("--root", required=True, help="directory the volumes' directories are made in")
    ap.add_argument("--node", required=True, help="the node these directories are on")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between passes")
    a = ap.parse_args()
    p = Provisioner(Api(a.server, a.ca, a.cert, a.key), os.path.abspath(a.root), a.node)
    log(f"{PROVISIONER}: volumes under {p.root} on node {a.node}, API server {a.server}")
    while True:
        try:
            p.pass_()
            p.forget("pass")
        except Exception as e:  # noqa: BLE001 - the API server restarting, RBAC not there yet, ...
            p.once("pass", f"error: listing from the API server: {type(e).__name__}: {e}")
        time.sleep(a.interval)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
