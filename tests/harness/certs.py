"""Test PKI for the TLS/SASL suites: a CA, an unrelated "rogue" CA, and server and client
certificates signed by them, written as PEM files (keys unencrypted PKCS#8) with Python's
``cryptography`` package.

    from certs import generate
    certs = generate(Path("/tmp/x/certs"))
    certs.ca.cert, certs.broker.combined, certs.mirror_admin.key, ...

Every ``CertPair`` has ``cert`` (the leaf certificate), ``key`` (its private key), ``chain`` (leaf
followed by its issuing CA) and ``combined`` (key + leaf + CA in one file: what Kafka's
``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` reads). Server certificates carry the
SAN ``IP:127.0.0.1, DNS:localhost`` (``wrong_host`` only ``DNS:wrong.example``).

CLI: ``python3 tests/harness/certs.py DIR`` writes the files and prints their paths as JSON.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ORG = "kmp-test"
SERVER_SAN = ("IP:127.0.0.1", "DNS:localhost")


@dataclass(frozen=True)
class CertPair:
    """One certificate and its key; ``subject`` is the RFC 4514 string (what Kafka shows as the
    principal of a TLS client, e.g. ``CN=mirror-admin,O=kmp-test``)."""
    subject: str
    cert: Path
    key: Path
    chain: Path
    combined: Path


@dataclass(frozen=True)
class TestCerts:
    dir: Path
    ca: CertPair              # the trusted test CA (its chain/combined hold only itself)
    rogue_ca: CertPair        # an unrelated CA nobody trusts
    broker: CertPair          # server (EKU serverAuth+clientAuth), CN=kmp-broker, SAN IP:127.0.0.1, DNS:localhost
    proxy: CertPair           # server, CN=kmp-proxy, same SAN
    mirror_admin: CertPair    # client, CN=mirror-admin,O=kmp-test
    app_client: CertPair      # client, CN=app-client,O=kmp-test
    expired_client: CertPair  # client signed by the CA, validity entirely in the past
    rogue_client: CertPair    # client signed by the rogue CA, claiming CN=mirror-admin,O=kmp-test
    wrong_host: CertPair      # server signed by the CA, SAN only DNS:wrong.example

    def paths(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else {kk: str(vv) for kk, vv in v.items()})
                for k, v in asdict(self).items()}


def _new_key(key_type: str):
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str, org: str | None = ORG) -> x509.Name:
    # Encoded O first, CN last: the RFC 4514/2253 string (reversed order) then reads "CN=...,O=...",
    # which is how Kafka (X500Principal.getName()) prints the principal.
    attrs = ([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else []) + [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    return x509.Name(attrs)


def _san(entries: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names = []
    for e in entries:
        kind, value = e.split(":", 1)
        names.append(x509.IPAddress(ipaddress.ip_address(value)) if kind == "IP" else x509.DNSName(value))
    return x509.SubjectAlternativeName(names)


class _Issuer:
    def __init__(self, name: x509.Name, key, cert: x509.Certificate):
        self.name, self.key, self.cert = name, key, cert


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _write(dir: Path, stem: str, key, cert: x509.Certificate, issuer_cert: x509.Certificate | None) -> CertPair:
    chain = _pem(cert) + (_pem(issuer_cert) if issuer_cert is not None else b"")
    files = {"cert": (f"{stem}.pem", _pem(cert)), "key": (f"{stem}.key", _key_pem(key)),
             "chain": (f"{stem}-chain.pem", chain), "combined": (f"{stem}-combined.pem", _key_pem(key) + chain)}
    out = {}
    for field, (fname, data) in files.items():
        path = dir / fname
        path.write_bytes(data)
        if field in ("key", "combined"):
            path.chmod(0o600)
        out[field] = path
    return CertPair(subject=cert.subject.rfc4514_string(), **out)


def _ca(dir: Path, stem: str, cn: str, now: dt.datetime, key_type: str) -> tuple[_Issuer, CertPair]:
    key = _new_key(key_type)
    name = _name(cn)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256()))
    return _Issuer(name, key, cert), _write(dir, stem, key, cert, None)


def _leaf(dir: Path, stem: str, issuer: _Issuer, subject: x509.Name, *, server: bool, san: tuple[str, ...] = (),
          not_before: dt.datetime, not_after: dt.datetime, key_type: str) -> CertPair:
    key = _new_key(key_type)
    # Server certificates may also authenticate as TLS clients (the proxy presents its own to an
    # upstream SSL listener); client certificates are for clients only.
    eku = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer.name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=key_type == "rsa",
                                      data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                                      encipher_only=False, decipher_only=False), critical=True)
         .add_extension(x509.ExtendedKeyUsage(eku), critical=False)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False))
    if san:
        b = b.add_extension(_san(san), critical=False)
    return _write(dir, stem, key, b.sign(issuer.key, hashes.SHA256()), issuer.cert)


def generate(dir: Path, key_type: str = "ec") -> TestCerts:
    """Writes the whole test PKI into ``dir`` (created if missing) and returns the paths.
    ``key_type``: ``ec`` (P-256, default: instant) or ``rsa`` (2048 bits)."""
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    valid = {"not_before": now - dt.timedelta(days=1), "not_after": now + dt.timedelta(days=365), "key_type": key_type}
    ca, ca_pair = _ca(dir, "ca", "kmp-test-ca", now, key_type)
    rogue, rogue_pair = _ca(dir, "rogue-ca", "kmp-rogue-ca", now, key_type)
    return TestCerts(
        dir=dir,
        ca=ca_pair,
        rogue_ca=rogue_pair,
        broker=_leaf(dir, "broker", ca, _name("kmp-broker"), server=True, san=SERVER_SAN, **valid),
        proxy=_leaf(dir, "proxy", ca, _name("kmp-proxy"), server=True, san=SERVER_SAN, **valid),
        mirror_admin=_leaf(dir, "mirror-admin", ca, _name("mirror-admin"), server=False, **valid),
        app_client=_leaf(dir, "app-client", ca, _name("app-client"), server=False, **valid),
        expired_client=_leaf(dir, "expired-client", ca, _name("expired-client"), server=False, key_type=key_type,
                             not_before=now - dt.timedelta(days=60), not_after=now - dt.timedelta(days=30)),
        rogue_client=_leaf(dir, "rogue-client", rogue, _name("mirror-admin"), server=False, **valid),
        wrong_host=_leaf(dir, "wrong-host", ca, _name("kmp-wrong-host"), server=True, san=("DNS:wrong.example",), **valid),
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    print(json.dumps(generate(Path(sys.argv[1])).paths(), indent=2))
