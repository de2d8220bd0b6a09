"""The rules of a :class:`~jupyter_exec.NetworkPolicy`: host names (with wildcards), addresses
and ranges, each with an optional port, parsed once and matched against every connection.

Host names are normalised (lower case, no trailing dot, IDNA) before they are compared, so
``PyPI.org.`` and ``pypi.org`` are one host; a rule's normalised text is what reasons quote.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = [
    "IPAddress",
    "IPNetwork",
    "Rule",
    "address_of",
    "is_global",
    "normalise_host",
    "parse_rule",
    "views",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
"""The NAT64 well-known prefix: its addresses are the IPv4 address in their last 32 bits."""

_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class Rule:
    """One parsed rule: a host name pattern or an address range, and optionally a port."""

    text: str
    """The rule as normalised text (what reasons quote)."""
    name: str | None = None
    """A host name, ``*.suffix`` or ``*``; None for an address rule."""
    network: IPNetwork | None = None
    port: int | None = None

    def matches(self, host: str, port: int) -> bool:
        """Whether the rule covers ``host`` (a normalised name or an address literal)."""
        if self.port is not None and self.port != port:
            return False
        address = address_of(host)
        if address is not None:
            return self.network is not None and any(a in self.network for a in views(address))
        if self.name is None:
            return False
        if self.name == "*":
            return True
        if self.name.startswith("*."):
            return host.endswith(self.name[1:])
        return host == self.name

    def covers_address(self, address: IPAddress, port: int) -> bool:
        """Whether an address rule covers a resolved ``address`` (one of :func:`views`)."""
        if self.network is None or (self.port is not None and self.port != port):
            return False
        return address in self.network


def views(address: IPAddress) -> tuple[IPAddress, ...]:
    """Every address a connection to ``address`` reaches or is carried to, to be checked
    each: an IPv4-mapped IPv6 address *is* its IPv4 address, a NAT64 one (``64:ff9b::/96``)
    is translated to it; a 6to4 (``2002::/16``) or Teredo one also carries one."""
    if isinstance(address, ipaddress.IPv4Address):
        return (address,)
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address in _NAT64:
        return (ipaddress.IPv4Address(int(address) & 0xFFFFFFFF),)
    if address.sixtofour is not None:
        return (address, address.sixtofour)
    if address.teredo is not None:
        return (address, address.teredo[1])
    return (address,)


def is_global(address: IPAddress) -> bool:
    """Whether ``address`` (one of :func:`views`) is on the public internet: not private,
    loopback, link-local, CGNAT (``100.64.0.0/10``), documentation, benchmarking, reserved,
    unspecified, multicast or (IPv6) site-local."""
    if not address.is_global or address.is_multicast or address.is_reserved:
        return False
    if address.is_unspecified or address.is_loopback or address.is_link_local:
        return False
    return not (isinstance(address, ipaddress.IPv6Address) and address.is_site_local)


def address_of(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def normalise_host(host: str) -> str:
    """Lower case, no trailing dot, IDNA for non-ASCII names; addresses in canonical form.

    Raises ``ValueError`` for something that is neither a host name nor an address.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    address = address_of(text)
    if address is not None:
        return str(address)
    text = text.rstrip(".").lower()
    if not text.isascii():
        try:
            text = text.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"{host!r} is not a valid host name") from None
    labels = text.split(".")
    if not text or len(text) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{host!r} is not a valid host name")
    return text


def _split_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: '[' without ']'")
        rest = text[end + 1 :]
        host = text[: end + 1]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ValueError(f"{text!r}: expected ':PORT' after ']'")
        return host, _port(rest[1:], text)
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, _port(port, text)
    return text, None  # a name, an IPv4 address or range, or a bare IPv6 address or range


def _port(text: str, rule: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{rule!r}: the port must be a number from 1 to 65535")
    return int(text)


def parse_rule(text: str) -> Rule:
    """Parse one allow/deny rule; ``ValueError`` says what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError(f"a rule must be a string, not {type(text).__name__}")
    raw = text.strip()
    if not raw:
        raise ValueError("an empty rule")
    if any(c.isspace() or c in "?#@" for c in raw) or "://" in raw:
        raise ValueError(f"{text!r}: give a host, 'host:port', an address or a range, not a URL")
    host, port = _split_port(raw)
    suffix = f":{port}" if port is not None else ""
    if "/" in host:
        try:
            network = ipaddress.ip_network(host.strip("[]"), strict=False)
        except ValueError:
            raise ValueError(f"{text!r} is not an address range like '10.0.0.0/8'") from None
        shown = f"[{network}]" if network.version == 6 and port is not None else str(network)
        return Rule(text=shown + suffix, network=network, port=port)
    address = address_of(host.strip("[]"))
    if address is not None:
        network = ipaddress.ip_network(address)
        shown = f"[{address}]" if address.version == 6 and port is not None else str(address)
        return Rule(text=shown + suffix, network=network, port=port)
    if host == "*":
        return Rule(text="*" + suffix, name="*", port=port)
    if host.startswith("*."):
        name = "*." + normalise_host(host[2:])
    elif "*" in host:
        raise ValueError(f"{text!r}: a wildcard may only be a whole first label ('*.example.org')")
    else:
        name = normalise_host(host)
    return Rule(text=name + suffix, name=name, port=port)
