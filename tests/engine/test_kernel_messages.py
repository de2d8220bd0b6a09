"""Reading kernel messages: signatures are checked, dates are left as the kernel sent them."""

from __future__ import annotations

import pytest
from jupyter_client.session import Session

from jupyter_exec.engine.receiver import _deserialize


def _frames(session: Session, content: dict[str, object]) -> list[bytes]:
    msg = session.msg("stream", content)
    parts = session.serialize(msg)
    _, frames = session.feed_identities(parts)
    return [bytes(f) for f in frames]


def test_a_signed_message_is_read_with_its_date_as_text() -> None:
    sender, receiver = Session(key=b"secret"), Session(key=b"secret")
    msg = _deserialize(receiver, _frames(sender, {"name": "stdout", "text": "hi"}))
    assert msg["content"] == {"name": "stdout", "text": "hi"}
    assert msg["msg_type"] == "stream"
    assert isinstance(msg["header"]["date"], str)


def test_a_tampered_or_replayed_message_is_refused() -> None:
    sender, receiver = Session(key=b"secret"), Session(key=b"secret")
    frames = _frames(sender, {"name": "stdout", "text": "hi"})
    tampered = [*frames[:4], frames[4].replace(b"hi", b"ho")]
    with pytest.raises(ValueError, match="invalid signature"):
        _deserialize(receiver, tampered)
    fresh = Session(key=b"secret")
    _deserialize(fresh, frames)
    with pytest.raises(ValueError, match="duplicate signature"):
        _deserialize(fresh, frames)
    with pytest.raises(ValueError, match="invalid signature"):
        _deserialize(Session(key=b"other"), _frames(sender, {"text": "x"}))


def test_a_short_message_is_refused() -> None:
    with pytest.raises(ValueError, match="malformed"):
        _deserialize(Session(key=b"k"), [b"sig", b"{}"])
