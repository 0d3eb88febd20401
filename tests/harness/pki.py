"""A throw-away PKI for the local control plane, made with the openssl CLI.

Everything is ECDSA P-256 (fast to generate, accepted by every Kubernetes
component):

- a CA that signs the rest and is the API server's --client-ca-file;
- the API server's serving certificate, SANs localhost, 127.0.0.1 and 10.0.0.1 (the
  `kubernetes` Service's address, the first of the service range: a pod on the real node,
  tests/harness/realnode.py, talks to the API server there);
- a separate key pair for signing and verifying service-account tokens;
- the admin client certificate, CN admin, O system:masters (RBAC super-user);
- the API server's client certificate towards kubelets: a real node's kubelet
  (tests/harness/realnode.py) lets in only clients the CA signed, so its pods cannot use it.

The openssl CLI (3.0+, for ``req -CA``) keeps the harness free of a crypto
dependency; generating the whole set takes well under a second.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .binaries import host_tool

CA_DAYS = 3650
LEAF_DAYS = 3650


@dataclass(frozen=True)
class ClusterPKI:
    """Paths of the PEM files of one local cluster."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_pub: Path
    admin_cert: Path
    admin_key: Path
    kubelet_client_cert: Path
    kubelet_client_key: Path
    """The API server's client certificate towards kubelets (logs, exec, port-forward)."""


def _openssl(*args: str) -> None:
    result = subprocess.run(
        [str(host_tool("openssl")), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


def _ec_key(path: Path) -> None:
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
    )
    path.chmod(0o600)


def _config(
    path: Path,
    common_name: str,
    organizations: Sequence[str],
    extensions: Sequence[str],
) -> Path:
    """Write a minimal openssl request config, so no system defaults leak in."""
    subject = [f"CN = {common_name}"]
    subject += [f"{index}.O = {org}" for index, org in enumerate(organizations)]
    path.write_text(
        "\n".join(
            [
                "[req]",
                "distinguished_name = subject",
                "prompt = no",
                "x509_extensions = extensions",
                "[subject]",
                *subject,
                "[extensions]",
                *extensions,
                "",
            ]
        ),
        encoding="utf-8",
    )
    return path


def _sign(
    directory: Path,
    name: str,
    ca: tuple[Path, Path],
    common_name: str,
    organizations: Sequence[str],
    extensions: Sequence[str],
) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _ec_key(key)
    cnf = _config(directory / f"{name}.cnf", common_name, organizations, extensions)
    _openssl(
        "req", "-new", "-x509", "-config", str(cnf), "-key", str(key),
        "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-days", str(LEAF_DAYS), "-sha256", "-out", str(cert),
    )  # fmt: skip
    return cert, key


def create_pki(
    directory: Path,
    hosts: Sequence[str] = ("localhost", "127.0.0.1", "10.0.0.1"),
) -> ClusterPKI:
    """Create CA, serving, service-account and admin credentials in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = directory / "ca.crt", directory / "ca.key"
    _ec_key(ca_key)
    ca_cnf = _config(
        directory / "ca.cnf",
        "kyma-gpu-local-ca",
        (),
        [
            "basicConstraints = critical, CA:TRUE",
            "keyUsage = critical, keyCertSign, cRLSign, digitalSignature",
            "subjectKeyIdentifier = hash",
        ],
    )
    _openssl(
        "req", "-new", "-x509", "-config", str(ca_cnf), "-key", str(ca_key),
        "-days", str(CA_DAYS), "-sha256", "-out", str(ca_cert),
    )  # fmt: skip

    alt_names = ", ".join(f"IP:{host}" if _is_ip(host) else f"DNS:{host}" for host in hosts)
    leaf = [
        "basicConstraints = critical, CA:FALSE",
        "keyUsage = critical, digitalSignature",
        "subjectKeyIdentifier = hash",
        "authorityKeyIdentifier = keyid",
    ]
    serving_cert, serving_key = _sign(
        directory,
        "apiserver",
        (ca_cert, ca_key),
        "kube-apiserver",
        (),
        [*leaf, "extendedKeyUsage = serverAuth", f"subjectAltName = {alt_names}"],
    )
    admin_cert, admin_key = _sign(
        directory,
        "admin",
        (ca_cert, ca_key),
        "admin",
        ("system:masters",),
        [*leaf, "extendedKeyUsage = clientAuth"],
    )

    kubelet_client_cert, kubelet_client_key = _sign(
        directory,
        "apiserver-kubelet-client",
        (ca_cert, ca_key),
        "kube-apiserver-kubelet-client",
        ("system:masters",),
        [*leaf, "extendedKeyUsage = clientAuth"],
    )

    sa_key, sa_pub = directory / "sa.key", directory / "sa.pub"
    _ec_key(sa_key)
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))

    return ClusterPKI(
        directory=directory,
        ca_cert=ca_cert,
        ca_key=ca_key,
        serving_cert=serving_cert,
        serving_key=serving_key,
        service_account_key=sa_key,
        service_account_pub=sa_pub,
        admin_cert=admin_cert,
        admin_key=admin_key,
        kubelet_client_cert=kubelet_client_cert,
        kubelet_client_key=kubelet_client_key,
    )


def client_cert(
    pki: ClusterPKI, name: str, common_name: str, organizations: Sequence[str] = ()
) -> tuple[Path, Path]:
    """A client certificate signed by the cluster CA (a kubelet's: CN system:node:<node>,
    O system:nodes); written next to the others as <name>.crt and <name>.key."""
    leaf = [
        "basicConstraints = critical, CA:FALSE",
        "keyUsage = critical, digitalSignature",
        "extendedKeyUsage = clientAuth",
    ]
    return _sign(pki.directory, name, (pki.ca_cert, pki.ca_key), common_name, organizations, leaf)


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
