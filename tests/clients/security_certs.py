#!/usr/bin/env python3
"""Test PKI for the security suites, made with the `openssl` CLI (EC P-256 keys, fresh each run).

    python3 tests/clients/security_certs.py DIR     # also imported by test_security.py

writes into DIR:

* `ca.pem`, `ca.key`: the test CA (the broker's and the clients' truststore).
* `server.key`, `server.crt`, `server.keystore.pem`: the broker certificate, SAN
  `IP:127.0.0.1`, `IP:127.0.1.1`-`.4` (the nodes of tests/clients/oxbow_cluster.py) and
  `DNS:localhost`, for server and client use (brokers dial each other with it), signed by the CA. The keystore is what Kafka's
  `ssl.keystore.type=PEM` reads: the unencrypted PKCS#8 key (`-----BEGIN PRIVATE KEY-----`)
  followed by the certificate chain (leaf, then CA).
* `client.key`, `client.crt`, `client.keystore.pem`: client `CN=alice,OU=clients,O=Oxbow`,
  signed by the CA.
* `foreign-ca.pem`, `foreign-ca.key` and `foreign-client.key`, `.crt`, `.keystore.pem`: the same
  client subject signed by an unrelated CA, which the broker must refuse.

Every key is unencrypted PKCS#8 (`openssl req -nodes`); EC P-256 works with rustls and Java 17
and takes milliseconds to generate.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

OPENSSL = "/usr/bin/openssl"
DAYS = "30"
CLIENT_SUBJECT = "/O=Oxbow/OU=clients/CN=alice"

CA_EXT = """basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
"""
SERVER_EXT = """basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, IP:127.0.1.1, IP:127.0.1.2, IP:127.0.1.3, IP:127.0.1.4, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""
CLIENT_EXT = """basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def _openssl(*args: str) -> None:
    proc = subprocess.run([OPENSSL, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")


def _key_and_request(out: Path, name: str, subject: str) -> None:
    """`name.key` (EC P-256, unencrypted PKCS#8) and `name.csr` for `subject`."""
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(out / f"{name}.key"), "-out", str(out / f"{name}.csr"), "-subj", subject)


def _ca(out: Path, name: str, subject: str) -> None:
    _key_and_request(out, name, subject)
    ext = out / f"{name}.ext"
    ext.write_text(CA_EXT)
    _openssl("x509", "-req", "-in", str(out / f"{name}.csr"), "-key", str(out / f"{name}.key"),
             "-days", DAYS, "-sha256", "-set_serial", "1", "-extfile", str(ext),
             "-out", str(out / f"{name}.pem"))
    ext.unlink()
    (out / f"{name}.csr").unlink()


def _leaf(out: Path, name: str, subject: str, ca: str, extensions: str, serial: int) -> None:
    """`name.key`, `name.crt` signed by `ca`, and `name.keystore.pem` (key, leaf, CA)."""
    _key_and_request(out, name, subject)
    ext = out / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", str(out / f"{name}.csr"), "-CA", str(out / f"{ca}.pem"),
             "-CAkey", str(out / f"{ca}.key"), "-days", DAYS, "-sha256", "-set_serial", str(serial),
             "-extfile", str(ext), "-out", str(out / f"{name}.crt"))
    ext.unlink()
    (out / f"{name}.csr").unlink()
    key = (out / f"{name}.key").read_text()
    if not key.startswith("-----BEGIN PRIVATE KEY-----"):
        raise RuntimeError(f"{name}.key is not an unencrypted PKCS#8 key: {key.splitlines()[0]}")
    chain = (out / f"{name}.crt").read_text() + (out / f"{ca}.pem").read_text()
    (out / f"{name}.keystore.pem").write_text(key + chain)


def generate(out: Path) -> Path:
    """Writes the whole test PKI into `out` (created if needed); returns `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _ca(out, "ca", "/O=Oxbow/CN=Oxbow Test CA")
    _leaf(out, "server", "/O=Oxbow/CN=localhost", "ca", SERVER_EXT, 2)
    _leaf(out, "client", CLIENT_SUBJECT, "ca", CLIENT_EXT, 3)
    _ca(out, "foreign-ca", "/O=Elsewhere/CN=Foreign Test CA")
    _leaf(out, "foreign-client", CLIENT_SUBJECT, "foreign-ca", CLIENT_EXT, 4)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    generate(Path(sys.argv[1]))
