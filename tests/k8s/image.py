#!/usr/bin/env python3
"""Build an OCI image archive from local files, without Docker or a registry.

    image.py --ref localhost/oxbow/oxbow-broker:dev --out broker.tar \
        --add target/release/oxbow-broker:/usr/local/bin/oxbow-broker --libs \
        --entrypoint /usr/local/bin/oxbow-broker

Writes one uncompressed layer (every file, its parent directories, and with --libs the shared
libraries and loader that `ldd` names for each dynamic executable), an image config, a manifest
and an OCI index into a tar in the OCI image layout, which `ctr images import` reads. The output is
deterministic: the same inputs give the same bytes and the same image digest.
"""

import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile


def ldd_deps(path):
    """Shared libraries (and the dynamic loader) a dynamic executable needs; [] when static."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True)
    if out.returncode != 0:  # "not a dynamic executable"
        return []
    deps = []
    for line in out.stdout.splitlines():
        m = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            deps.append(m.group(1))
    return deps


class Layer:
    def __init__(self):
        self.entries = {}  # path in image -> (kind, source or target, mode)

    def add_dirs(self, path):
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.entries.setdefault("/".join(parts[:i]), ("dir", None, 0o755))

    def add_file(self, src, dst):
        if not os.path.isfile(src):
            sys.exit(f"image.py: {src}: not a file")
        dst = dst.lstrip("/")
        self.add_dirs(dst)
        self.entries[dst] = ("file", os.path.realpath(src), os.stat(src).st_mode & 0o777)

    def add_symlink(self, dst, target):
        dst = dst.lstrip("/")
        self.add_dirs(dst)
        self.entries[dst] = ("symlink", target, 0o777)

    def add_dir(self, dst, mode=0o755):
        dst = dst.strip("/")
        self.add_dirs(dst + "/x")
        self.entries[dst] = ("dir", None, mode)

    def tar_bytes(self):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self.entries):
                kind, src, mode = self.entries[path]
                info = tarfile.TarInfo(path)
                info.mtime, info.uid, info.gid, info.mode = 0, 0, 0, mode
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, src
                    tar.addfile(info)
                else:
                    info.size = os.path.getsize(src)
                    with open(src, "rb") as f:
                        tar.addfile(info, f)
        return buf.getvalue()


def blob(data):
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", required=True, help="image reference, e.g. localhost/oxbow/pause:3.10")
    ap.add_argument("--out", required=True, help="OCI archive to write")
    ap.add_argument("--add", action="append", default=[], metavar="SRC:DST", help="file to copy into the image")
    ap.add_argument("--symlink", action="append", default=[], metavar="DST:TARGET")
    ap.add_argument("--dir", action="append", default=[], metavar="DST", help="empty directory (mode 1777 for /tmp)")
    ap.add_argument("--libs", action="store_true", help="also copy the shared libraries each file needs")
    ap.add_argument("--entrypoint", action="append", default=[])
    ap.add_argument("--cmd", action="append", default=[])
    ap.add_argument("--env", action="append", default=[], metavar="K=V")
    ap.add_argument("--workdir", default="/")
    ap.add_argument("--user", default="")
    ap.add_argument("--port", action="append", default=[], help="exposed port, e.g. 9092/tcp")
    args = ap.parse_args()

    layer = Layer()
    for spec in args.add:
        src, _, dst = spec.partition(":")
        layer.add_file(src, dst)
        if args.libs:
            for dep in ldd_deps(src):
                layer.add_file(dep, dep)
    for spec in args.symlink:
        dst, _, target = spec.partition(":")
        layer.add_symlink(dst, target)
    for d in args.dir:
        layer.add_dir(d, 0o1777 if d.strip("/") == "tmp" else 0o755)
    # Files that programs expect on every image (name lookups of uid 0, DNS config mount point).
    layer.add_dir("etc")

    layer_digest, layer_data = blob(layer.tar_bytes())
    env = ["PATH=/usr/local/bin:/usr/bin:/bin"] + args.env
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": env,
            "Entrypoint": args.entrypoint or None,
            "Cmd": args.cmd or None,
            "WorkingDir": args.workdir,
            "User": args.user,
            "ExposedPorts": {p: {} for p in args.port} or None,
            "Labels": {"org.opencontainers.image.source": "https://github.com/oxbow/oxbow"},
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "tests/k8s/image.py"}],
    }
    config["config"] = {k: v for k, v in config["config"].items() if v is not None}
    config_digest, config_data = blob(json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_data),
        },
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": len(layer_data)}
        ],
    }
    manifest_digest, manifest_data = blob(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
    tag = args.ref.rsplit(":", 1)[1] if ":" in args.ref.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_data),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": args.ref, "org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    files = [
        ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
        ("index.json", json.dumps(index, sort_keys=True).encode()),
    ]
    for digest, data in ((layer_digest, layer_data), (config_digest, config_data), (manifest_digest, manifest_data)):
        files.append(("blobs/sha256/" + digest.split(":")[1], data))
    tmp = args.out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, args.out)
    print(f"{args.ref} {manifest_digest} ({len(layer_data) // 1024} KiB layer) -> {args.out}")


if __name__ == "__main__":
    main()
