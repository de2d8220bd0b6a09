"""The TLS of an intercepted HTTPS connection: a per-session certificate authority that signs a
certificate for each host whose requests carry secrets, and the contexts of the two legs.

Why these parts: ``cryptography`` (PyCA) makes the keys and certificates, and the standard
library's :mod:`ssl` (OpenSSL) speaks TLS on both legs, inside the proxy's own asyncio loop. That
is two well-kept libraries and no hand-written TLS; mitmproxy as a library would bring about
forty pinned packages (an older ``cryptography``, ``tornado``, Flask, a Rust extension) into
every environment that runs a kernel with secrets (docs/howto/network.md says more).

The authority lives in this process's memory only. Its private key is never written anywhere;
the certificates it signs share one leaf key, also in memory, loaded into OpenSSL through an
anonymous memory file (``memfd``) where the platform has one, else a private temporary file
removed at once. The authority is *name-constrained* to the hosts that have secrets: even a
copy of its key could not vouch for any other name to a client that honours the constraint
(OpenSSL does).

``cryptography`` (the ``network`` extra) is imported when an authority is made, that is when a
policy has secrets, so importing this module (and the core) stays light.
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_exec.exceptions import MissingDependency

if TYPE_CHECKING:
    from cryptography import x509

__all__ = ["Authority", "server_name", "upstream_context"]

#: ALPN offered on both legs: the proxy reads and writes HTTP/1.1 only, so a client that would
#: prefer HTTP/2 (curl does) falls back to it.
ALPN = ["http/1.1"]
VALIDITY = datetime.timedelta(days=30)
"""How long the session's certificates are valid (a session that lasts longer restarts its
proxy only with its kernel; a month is far beyond any session's life)."""
SKEW = datetime.timedelta(hours=1)
"""Certificates start an hour in the past: a container's clock a little behind still accepts."""

_server_names: weakref.WeakKeyDictionary[ssl.SSLObject, str | None] = weakref.WeakKeyDictionary()


def _remember_server_name(
    connection: ssl.SSLObject | ssl.SSLSocket, name: str | None, context: ssl.SSLContext
) -> None:
    """The server context's SNI callback: keep the name the kernel's client asked for."""
    if isinstance(connection, ssl.SSLObject):
        _server_names[connection] = name


def server_name(connection: object) -> str | None:
    """The TLS server name (SNI) the kernel sent on ``connection`` (an ``SSLObject`` of a
    server context made here); None when it sent none."""
    return _server_names.get(connection) if isinstance(connection, ssl.SSLObject) else None


def _name(text: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text[:64])])


class Authority:
    """One session's certificate authority, for ``hosts`` (normalised names) only."""

    def __init__(self, hosts: Iterable[str], session: str = "") -> None:
        try:
            from cryptography import x509
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.asymmetric import ec
        except ImportError as exc:
            raise MissingDependency(
                "intercepting HTTPS for a policy's secrets needs 'cryptography': "
                "pip install 'jupyter-exec[network]'"
            ) from exc
        self.hosts = tuple(sorted(set(hosts)))
        if not self.hosts:
            raise ValueError("an authority needs at least one host to vouch for")
        now = datetime.datetime.now(datetime.timezone.utc)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(f"jupyter-exec session CA {session}".strip())
        public = self._key.public_key()
        self._ski = x509.SubjectKeyIdentifier.from_public_key(public)
        constraints = x509.NameConstraints(
            permitted_subtrees=[x509.DNSName(host) for host in self.hosts], excluded_subtrees=None
        )
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .add_extension(constraints, critical=True)
            .add_extension(self._ski, critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self._contexts: dict[str, ssl.SSLContext] = {}

    @property
    def certificate_pem(self) -> bytes:
        """The authority's certificate (public: this is what the kernel's trust store gets)."""
        from cryptography.hazmat.primitives import serialization

        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def server_context(self, host: str) -> ssl.SSLContext:
        """The context that presents ``host``'s certificate to the kernel (made once per host)."""
        from cryptography.hazmat.primitives import serialization

        context = self._contexts.get(host)
        if context is None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.set_alpn_protocols(ALPN)
            context.sni_callback = _remember_server_name
            leaf = self._leaf(host).public_bytes(serialization.Encoding.PEM)
            key = self._leaf_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            _load_chain(context, leaf + self.certificate_pem + key)
            self._contexts[host] = context
        return context

    def _leaf(self, host: str) -> x509.Certificate:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import ExtendedKeyUsageOID

        if host not in self.hosts:
            raise ValueError(f"{host!r} has no secrets: its connections are not intercepted")
        now = datetime.datetime.now(datetime.timezone.utc)
        public = self._leaf_key.public_key()
        return (
            x509.CertificateBuilder()
            .subject_name(_name(host))
            .issuer_name(self.certificate.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW)
            .not_valid_after(now + VALIDITY - SKEW)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(self._ski),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _load_chain(context: ssl.SSLContext, pem: bytes) -> None:
    """``load_cert_chain`` reads files only: give it one that never reaches a disk."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("jx-leaf")
        try:
            view = memoryview(pem)
            while view:
                view = view[os.write(fd, view) :]
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="jx-leaf-") as folder:  # mode 0700
        path = Path(folder) / "leaf.pem"
        path.touch(mode=0o600)
        path.write_bytes(pem)
        try:
            context.load_cert_chain(path)
        finally:
            path.unlink()


def upstream_context(extra_ca: str | None = None) -> ssl.SSLContext:
    """The context the proxy verifies a real host with: the system's trust, plus ``extra_ca``
    (the PEM text of its certificates, as :func:`~jupyter_exec.network.pem.certificates` gives)."""
    context = ssl.create_default_context()
    if extra_ca:
        context.load_verify_locations(cadata=extra_ca)
    context.set_alpn_protocols(ALPN)
    return context
