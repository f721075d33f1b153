# Shared settings for tests/k8s/{build,up,down,smoke}. Sourced, not run.
# shellcheck shell=bash

K8S_VERSION=v1.34.4
COREDNS_VERSION=v1.12.4
HELM_VERSION=v3.19.5
K8S_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$K8S_DIR/../.." && pwd)
CACHE_ROOT=${OXBOW_CACHE:-$HOME/.cache/oxbow}
# Go's module and build caches live beside our other caches, so CI keeps them between runs.
export GOMODCACHE=$CACHE_ROOT/go/mod GOCACHE=$CACHE_ROOT/go/build GOFLAGS=-mod=mod GOTOOLCHAIN=local
# Everything a running cluster owns: data, certificates, logs, pid files. `down` removes it.
STATE=${OXBOW_K8S_STATE:-/var/lib/oxbow-k8s}
KUBECONFIG_PATH=$STATE/kubeconfig
# The node's address: a /32 on the loopback interface, so it does not depend on the host's
# network. Pods reach it through their point-to-point veth route to the host.
NODE_IP=172.30.0.1
NODE_NAME=oxbow-node
POD_CIDR=10.244.0.0/16
NODE_POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
CLUSTER_DOMAIN=cluster.local
PAUSE_IMAGE=localhost/oxbow/pause:3.10
COREDNS_IMAGE=localhost/oxbow/coredns:${COREDNS_VERSION#v}

# The binaries' cache key: every input of the build (sources, module files, the build script,
# the versions it stamps, the Go and C compilers), and nothing else, so editing the cluster's
# start-up helpers here does not rebuild Kubernetes. A change to any input builds a new set
# beside the old one.
build_key() {
	(
		cd "$K8S_DIR" || exit 1
		find src -type f -print0 | sort -z | xargs -0 sha256sum
		sha256sum build
		echo "$K8S_VERSION $COREDNS_VERSION $HELM_VERSION $GOFLAGS $GOTOOLCHAIN"
		go version
		gcc --version | head -1
	) | sha256sum | cut -c1-16
}

bin_dir() { echo "$CACHE_ROOT/k8s/$K8S_VERSION-$(build_key)/bin"; }

# The node's containerd socket, and the import of OCI archives (tests/k8s/image.py) into the
# namespace the kubelet uses.
CONTAINERD_SOCK=$STATE/containerd/containerd.sock
import_images() {
	local t
	for t in "$@"; do
		ctr -a "$CONTAINERD_SOCK" -n k8s.io images import --all-platforms --digests "$t" >/dev/null
	done
}

log() { printf '[k8s %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
