"""The certificates of a policy's ``extra_ca`` file, and nothing else of it.

What the file holds goes into the kernel's trust bundle, which the kernel can read. So the file
is read as PEM blocks, not copied: each ``CERTIFICATE`` block is decoded and written out again
(canonical base64, nothing between or around the blocks), and a file that holds a private key
of any kind (``PRIVATE KEY``, ``RSA PRIVATE KEY``, ``EC PRIVATE KEY``, ``ENCRYPTED PRIVATE
KEY``, ``OPENSSH PRIVATE KEY``...) is refused outright, naming what it found: a key next to a
certificate is a mistake the person should hear about, not one to mend quietly. Other blocks
(parameters, CRLs) and text outside the blocks are left out.
"""

from __future__ import annotations

import base64
import binascii
import re
import ssl

__all__ = ["MAX_PEM", "certificates", "read_certificates"]

MAX_PEM = 16 * 1024 * 1024
"""The largest ``extra_ca`` file read (a trust store of every public authority is ~250 KB)."""

_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)
_KEY = re.compile(rb"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----")
_HEADER = re.compile(rb"^[A-Za-z0-9-]+:")


def certificates(data: bytes) -> str:
    """The PEM text of every certificate in ``data``, re-encoded; ``ValueError`` (its text
    fit to show) when ``data`` holds a private key, a certificate that does not load, or none."""
    key = _KEY.search(data)
    if key is not None:
        label = key.group(1).decode("ascii")
        raise ValueError(
            f"it holds a private key ({label}): give a file of CA certificates only (the file's "
            "certificates are put in the kernel's trust bundle, where the kernel can read them)"
        )
    found: list[str] = []
    for block in _BLOCK.finditer(data):
        if block.group(1) != b"CERTIFICATE":
            continue
        body = block.group(2)
        if any(_HEADER.match(line) for line in body.splitlines()):
            raise ValueError("a CERTIFICATE block has PEM headers (an encrypted block?)")
        try:
            der = base64.b64decode(b"".join(body.split()), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("a CERTIFICATE block is not valid base64") from None
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=der)
        except ssl.SSLError as exc:
            raise ValueError(f"a CERTIFICATE block is not a certificate ({exc})") from None
        found.append(ssl.DER_cert_to_PEM_cert(der))
    if not found:
        raise ValueError("it holds no CERTIFICATE block")
    return "".join(found)


def read_certificates(path: str) -> str:
    """:func:`certificates` of the file at ``path``; ``OSError`` if it cannot be read,
    ``ValueError`` if it is too large or is refused."""
    with open(path, "rb") as file:
        data = file.read(MAX_PEM + 1)
    if len(data) > MAX_PEM:
        raise ValueError(f"it is larger than {MAX_PEM // (1024 * 1024)} MiB")
    return certificates(data)
