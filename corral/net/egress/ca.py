"""The node's egress CA and the leaf certificates the proxy presents to instances.

The CA (an EC P-256 key and a ten-year self-signed certificate) is made once and
kept under the data directory (`egress-ca/ca.key`, mode 0600, and `ca.crt`); every
instance trusts `ca.crt` from boot. Leaf certificates are minted per host on first
use, signed by the CA, and kept in memory as ready server `SSLContext`s. All
leaves share one key: minting a certificate is then a signature, not a key
generation, and the key never leaves the proxy's process.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "Corral egress CA"
LEAF_DAYS = 30
CACHED_LEAVES = 2048


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _new_ca(directory: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Corral")])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_private(directory / "ca.key", key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))
    (directory / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class EgressCA:
    """Loads (or makes) the CA in `directory`; hands out a server context per host."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        if not (self.directory / "ca.key").exists() or not (self.directory / "ca.crt").exists():
            _new_ca(self.directory)
        self.cert_path = self.directory / "ca.crt"
        self.cert_pem = self.cert_path.read_bytes()
        self._cert = x509.load_pem_x509_certificate(self.cert_pem)
        key = serialization.load_pem_private_key((self.directory / "ca.key").read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{self.directory / 'ca.key'} is not an EC key")
        self._key = key
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key_pem = self._leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._lock = threading.Lock()

    def mint(self, host: str) -> x509.Certificate:
        """A leaf certificate for `host` (a name or an IP literal), signed by the CA."""
        host = host.strip("[]").lower()
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        now = _now()
        common_name = host if len(host) <= 64 else host[:64]
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._cert.subject)
            .public_key(self._leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    def context_for(self, host: str) -> ssl.SSLContext:
        """The server context presenting `host`'s leaf (with the CA in the chain); cached."""
        host = host.strip("[]").lower()
        with self._lock:
            context = self._contexts.get(host)
            if context is not None:
                self._contexts.move_to_end(host)
                return context
        cert = self.mint(host)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.set_alpn_protocols(["http/1.1"])
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.cert_pem
        # load_cert_chain reads files only: a private temporary file, gone at once.
        with tempfile.TemporaryDirectory() as scratch:
            cert_file = Path(scratch) / "leaf.pem"
            key_file = Path(scratch) / "leaf.key"
            cert_file.write_bytes(chain)
            _write_private(key_file, self._leaf_key_pem)
            context.load_cert_chain(cert_file, key_file)
        with self._lock:
            self._contexts[host] = context
            while len(self._contexts) > CACHED_LEAVES:
                self._contexts.popitem(last=False)
        return context
