"""``NetworkPolicy``: which hosts a Docker kernel may reach, as a frozen, validated value.

A policy is data: lists of rules, checked when the policy is made (a malformed rule is
:class:`~jupyter_exec.InvalidArgument` before any kernel starts), compared and hashed by value
so a pool can key kernels by it. The proxy (:mod:`jupyter_exec.network.proxy`) asks
:meth:`NetworkPolicy.decide` about every connection. The rules:

* ``"pypi.org"`` one host, any port; ``"pypi.org:443"`` that port only;
* ``"*.example.org"`` any name under ``example.org`` (not ``example.org`` itself); ``"*"`` any name;
* ``"10.1.2.3"``, ``"[::1]:8080"``, ``"10.0.0.0/8"``: addresses and ranges. They decide
  connections to address literals, and a ``deny`` range also refuses a *name* that resolves
  into it (checked by the proxy on the addresses it resolved).

Nothing is allowed unless a rule allows it; ``deny`` wins over ``allow``; a connection neither
list decides goes to ``ask`` when there is one, else it is refused.

A policy with ``secrets`` needs the ``network`` extra (``cryptography``): HTTPS to a host with
secrets is intercepted with a per-session certificate authority. Without it the policy is a
:class:`~jupyter_exec.MissingDependency` when it is made, before any kernel starts.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_exec.exceptions import InvalidArgument, MissingDependency
from jupyter_exec.network.pem import read_certificates
from jupyter_exec.network.rules import (
    Rule,
    address_of,
    is_global,
    normalise_host,
    parse_rule,
    views,
)

__all__ = [
    "Connection",
    "Decision",
    "NetworkPolicy",
    "NetworkRequest",
    "Rule",
    "normalise_host",
    "parse_rule",
]

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True)
class NetworkRequest:
    """What ``ask`` is asked about: a connection no rule decides."""

    host: str
    port: int
    session: str
    """The session's name."""
    cell: int | None
    """The 0-based index of the cell running when the kernel tried it (None: between cells)."""


@dataclass(frozen=True)
class Decision:
    """The policy's answer for one connection, with a reason a person (or a model) can act on."""

    allowed: bool
    reason: str


@dataclass(frozen=True)
class Connection:
    """One connection the kernel tried through the proxy, and what was decided."""

    host: str
    port: int
    decision: str
    """``"allowed"`` or ``"denied"``."""
    reason: str
    secret: bool = False
    """Whether the proxy added the policy's secret headers to this request (never their values).
    An intercepted HTTPS connection is recorded once per request, a tunnelled one once."""

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-able data; ``"secret": true`` only where a secret was added."""
        data: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "decision": self.decision,
            "reason": self.reason,
        }
        if self.secret:
            data["secret"] = True
        return data


AskCallback = Callable[[NetworkRequest], "bool | Decision | Awaitable[bool | Decision]"]
"""``True`` allows, ``False`` denies; a :class:`Decision` does either and says why."""


class NetworkPolicy:
    """Which hosts a Docker kernel may reach; see the module docstring for the rules.

    ``secrets`` maps a host name to headers (``{"api.example.org": {"Authorization": "..."}}``)
    that the proxy adds to that host's HTTPS requests (intercepted, the host's certificate
    verified; plain HTTP to it is refused); they never enter the kernel. Their values are kept
    out of ``repr`` and :meth:`to_dict`. ``ask`` decides connections no rule decides, per host
    and port. ``extra_ca`` is a PEM file of certificate authorities trusted besides the
    system's, for HTTPS hosts: by the proxy when it connects to a host with secrets, and by the
    kernel (its CA bundle includes them) for the hosts it reaches through a tunnel; only its
    certificates are used, and a file that holds a private key is refused.
    """

    __slots__ = ("_allow", "_ask", "_deny", "_extra_ca", "_secrets")
    _allow: tuple[Rule, ...]
    _deny: tuple[Rule, ...]
    _secrets: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    _ask: AskCallback | None
    _extra_ca: str | None

    def __init__(
        self,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        secrets: Mapping[str, Mapping[str, str]] | None = None,
        ask: AskCallback | None = None,
        *,
        extra_ca: str | os.PathLike[str] | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "_allow", _rules(allow, "allow"))
        set_(self, "_deny", _rules(deny, "deny"))
        set_(self, "_secrets", _secrets(secrets))
        if ask is not None and not callable(ask):
            raise InvalidArgument("NetworkPolicy ask must be a callable ask(request) -> bool")
        set_(self, "_ask", ask)
        set_(self, "_extra_ca", _extra_ca(extra_ca))
        if self._secrets and importlib.util.find_spec("cryptography") is None:
            raise MissingDependency(
                "NetworkPolicy secrets need the 'network' extra, which intercepts HTTPS to the "
                "hosts with secrets: pip install 'jupyter-exec[network]'"
            )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("NetworkPolicy is immutable; make a new one")

    # -- what it is ------------------------------------------------------------------
    @property
    def allow(self) -> tuple[str, ...]:
        return tuple(rule.text for rule in self._allow)

    @property
    def deny(self) -> tuple[str, ...]:
        return tuple(rule.text for rule in self._deny)

    @property
    def secrets(self) -> dict[str, dict[str, str]]:
        """A copy of the per-host headers (the values are secrets: handle with care)."""
        return {host: dict(headers) for host, headers in self._secrets}

    @property
    def ask(self) -> AskCallback | None:
        return self._ask

    @property
    def extra_ca(self) -> str | None:
        """The PEM file of extra certificate authorities (an absolute path), or None."""
        return self._extra_ca

    @property
    def secret_hosts(self) -> tuple[str, ...]:
        """The hosts whose requests get secret headers (whose HTTPS is intercepted)."""
        return tuple(host for host, _ in self._secrets)

    def headers_for(self, host: str) -> tuple[tuple[str, str], ...]:
        """The secret headers to add to requests to ``host`` (a normalised name)."""
        return next((headers for name, headers in self._secrets if name == host), ())

    def secret_values(self) -> tuple[str, ...]:
        """Every secret header value (what recorded outputs are scanned for)."""
        return tuple(value for _, headers in self._secrets for _, value in headers)

    def _key(self) -> tuple[Any, ...]:
        return (self.allow, self.deny, self._secrets, self._ask, self._extra_ca)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NetworkPolicy) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        parts = [f"allow={list(self.allow)!r}"]
        if self._deny:
            parts.append(f"deny={list(self.deny)!r}")
        if self._secrets:
            hidden = {host: [name for name, _ in headers] for host, headers in self._secrets}
            parts.append(f"secrets=<headers {hidden!r}>")
        if self._ask is not None:
            parts.append(f"ask={self._ask!r}")
        if self._extra_ca is not None:
            parts.append(f"extra_ca={self._extra_ca!r}")
        return f"NetworkPolicy({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        """The rules as JSON-able data; secret header *names* only, never their values
        (``extra_ca`` only when one is given)."""
        data: dict[str, Any] = {
            "allow": list(self.allow),
            "deny": list(self.deny),
            "secrets": {host: [name for name, _ in headers] for host, headers in self._secrets},
            "ask": self._ask is not None,
        }
        if self._extra_ca is not None:
            data["extra_ca"] = self._extra_ca
        return data

    @classmethod
    def from_value(cls, value: Any) -> NetworkPolicy:
        """A policy from a policy or a mapping (``{"allow": [...], "deny": [...], ...}``)."""
        if isinstance(value, NetworkPolicy):
            return value
        if not isinstance(value, Mapping):
            raise InvalidArgument(
                f"network must be a NetworkPolicy or a mapping with allow/deny, not {value!r}"
            )
        unknown = sorted(set(value) - {"allow", "deny", "secrets", "ask", "extra_ca"})
        if unknown:
            raise InvalidArgument(
                f"unknown network policy key(s) {', '.join(map(repr, unknown))}; "
                "known: allow, deny, secrets, ask, extra_ca"
            )
        return cls(
            allow=value.get("allow", ()),
            deny=value.get("deny", ()),
            secrets=value.get("secrets"),
            ask=value.get("ask"),
            extra_ca=value.get("extra_ca"),
        )

    # -- deciding --------------------------------------------------------------------
    def describe(self) -> str:
        """``allowed: pypi.org, files.pythonhosted.org`` (what refusals quote)."""
        allowed = ", ".join(self.allow) or "nothing"
        denied = f"; denied: {', '.join(self.deny)}" if self._deny else ""
        return f"allowed: {allowed}{denied}"

    def decide(self, host: str, port: int) -> Decision:
        """The lists' answer for ``host:port``; an undecided connection is refused here
        (the proxy asks ``ask`` first when there is one, see :meth:`undecided`)."""
        try:
            name = normalise_host(host)
        except ValueError:
            return Decision(False, f"{host!r} is not a valid host name")
        for rule in self._deny:
            if rule.matches(name, port):
                return Decision(False, f"denied by rule {rule.text!r}")
        for rule in self._allow:
            if rule.matches(name, port):
                return Decision(True, f"allowed by rule {rule.text!r}")
        return Decision(False, "not in the allow list")

    def undecided(self, host: str, port: int) -> bool:
        """Whether no rule matches ``host:port`` (so ``ask`` may decide it)."""
        try:
            name = normalise_host(host)
        except ValueError:
            return False
        return not any(rule.matches(name, port) for rule in (*self._deny, *self._allow))

    def check_addresses(self, host: str, port: int, addresses: Iterable[str]) -> Decision | None:
        """A refusal when a name resolved into a denied range, or to an address that is not
        globally routable (:func:`~jupyter_exec.network.rules.routable_views`) and that no
        ``allow`` address rule lists; None when the addresses are fine.

        The proxy connects to exactly the addresses checked here (it resolves once, on the
        host), so a name cannot answer one address to the check and another to the connect.
        Without the second check an allowed (or wildcard) name that resolves to 127.0.0.1, a
        private network, CGNAT space or a cloud metadata address (169.254.169.254,
        100.100.100.200) would reach services that are not the internet's.
        """
        for text in addresses:
            for address in views(ipaddress.ip_address(text)):
                for rule in self._deny:
                    if rule.covers_address(address, port):
                        return Decision(
                            False, f"{host} resolves to {address}, denied by {rule.text!r}"
                        )
                if not is_global(address) and not any(
                    rule.covers_address(address, port) for rule in self._allow
                ):
                    return Decision(
                        False,
                        f"{host} resolves to {address}, a local, private or otherwise not "
                        "globally routable address the allow list does not name",
                    )
        return None


def _rules(values: Iterable[str], what: str) -> tuple[Rule, ...]:
    if isinstance(values, str):
        raise InvalidArgument(f"NetworkPolicy {what} must be a list of rules, not one string")
    try:
        items = list(values)
    except TypeError:
        raise InvalidArgument(f"NetworkPolicy {what} must be a list of rules") from None
    rules: list[Rule] = []
    for item in items:
        try:
            rule = parse_rule(item)
        except ValueError as exc:
            raise InvalidArgument(f"NetworkPolicy {what}: {exc}") from None
        if rule not in rules:
            rules.append(rule)
    return tuple(rules)


def _secrets(
    value: Mapping[str, Mapping[str, str]] | None,
) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InvalidArgument("NetworkPolicy secrets must map a host name to a mapping of headers")
    result: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    for host, headers in value.items():
        try:
            name = normalise_host(host) if isinstance(host, str) else ""
        except ValueError as exc:
            raise InvalidArgument(f"NetworkPolicy secrets: {exc}") from None
        if not name or address_of(name) is not None:
            raise InvalidArgument(f"NetworkPolicy secrets: {host!r} must be a host name")
        if not isinstance(headers, Mapping) or not headers:
            raise InvalidArgument(
                f"NetworkPolicy secrets[{host!r}] must be a non-empty mapping of header to value"
            )
        pairs: list[tuple[str, str]] = []
        for header, text in headers.items():
            if not isinstance(header, str) or not _HEADER_NAME.match(header):
                raise InvalidArgument(
                    f"NetworkPolicy secrets[{host!r}]: {header!r} is not a header name"
                )
            if not isinstance(text, str) or any(c in text for c in "\r\n\0"):
                # The value itself is never quoted: it is a secret.
                raise InvalidArgument(
                    f"NetworkPolicy secrets[{host!r}][{header!r}] must be text on one line"
                )
            pairs.append((header, text))
        result.append((name, tuple(sorted(pairs))))
    return tuple(sorted(result))


def _extra_ca(value: str | os.PathLike[str] | None) -> str | None:
    """The absolute path of a PEM file of certificates (and nothing else: a private key in it
    is refused, see :mod:`jupyter_exec.network.pem`)."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not str(value):
        raise InvalidArgument("NetworkPolicy extra_ca must be the path of a PEM file")
    path = os.path.abspath(os.fspath(value))
    try:
        read_certificates(path)
    except OSError as exc:
        raise InvalidArgument(
            f"NetworkPolicy extra_ca {path!r} is not a readable PEM file of certificates "
            f"({exc.strerror or exc})"
        ) from None
    except ValueError as exc:
        raise InvalidArgument(f"NetworkPolicy extra_ca {path!r} is refused: {exc}") from None
    return path
