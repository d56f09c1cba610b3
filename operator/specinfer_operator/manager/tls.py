"""The metrics port's TLS: the certificate an operator is given, or one made at start, as controller-runtime does."""

from __future__ import annotations

import datetime
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(name: str) -> tuple[bytes, bytes]:
    """A PEM certificate and key valid for a year: Prometheus then scrapes with insecureSkipVerify, and the
    token still authenticates the scraper; give --metrics-cert-dir to have the scraper verify the server too."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name), x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


def server_context(cert_dir: str, name: str = "specinfer-operator") -> ssl.SSLContext:
    """TLS 1.2 or later with `cert_dir`'s tls.crt and tls.key (a kubernetes.io/tls Secret mounted there), or a
    self-signed pair kept in memory: the root filesystem is read-only, so it is passed through a memfd."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir:
        context.load_cert_chain(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
        return context
    fd = os.memfd_create("metrics-tls")
    try:
        os.write(fd, b"".join(self_signed(name)))
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    return context
