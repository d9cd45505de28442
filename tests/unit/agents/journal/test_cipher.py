"""grimoire.agents.journal.cipher: a journal payload opens only with the key it was
sealed with and the binding (agent, key, position) it was sealed to; anything else
is a typed `PayloadUnreadable` with a machine-readable reason, never garbage."""

from __future__ import annotations

import dataclasses

import pytest

from grimoire.agents.exceptions import AgentsError, PayloadUnreadable
from grimoire.agents.journal.cipher import (
    AUTHENTICATION_FAILED,
    KEY_MISMATCH,
    MALFORMED_PAYLOAD,
    NONCE_BYTES,
    TAG_BYTES,
    SealedPayload,
    open_sealed,
    seal,
)
from grimoire.streams.exceptions import GrimoireError
from grimoire.streams.journal.entry import associated_data
from grimoire.tables.journal.keystore import AgentKey, new_key_id, new_secret

PLAINTEXT = b'{"agent_id": "a", "text": "the deploy failed on step 3"}'


def make_key(agent_id: str = "a") -> AgentKey:
    return AgentKey(agent_id, new_key_id(), new_secret())


def bound(key: AgentKey, seq: int = 7) -> bytes:
    return associated_data(key.agent_id, key.key_id, seq)


def flip(data: bytes, index: int = 0) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def unreadable(key: AgentKey, sealed: SealedPayload, associated: bytes) -> str:
    with pytest.raises(PayloadUnreadable) as caught:
        open_sealed(key, sealed, associated=associated)
    return caught.value.reason


def test_round_trip() -> None:
    key = make_key()
    sealed = seal(key, PLAINTEXT, associated=bound(key))
    assert sealed.key_id == key.key_id
    assert len(sealed.nonce) == NONCE_BYTES
    assert len(sealed.ciphertext) == len(PLAINTEXT) + TAG_BYTES
    assert PLAINTEXT not in sealed.ciphertext
    assert open_sealed(key, sealed, associated=bound(key)) == PLAINTEXT


def test_an_empty_payload_round_trips() -> None:
    key = make_key()
    assert open_sealed(key, seal(key, b"", associated=b""), associated=b"") == b""


def test_each_seal_draws_a_fresh_nonce() -> None:
    key = make_key()
    one, two = (seal(key, PLAINTEXT, associated=bound(key)) for _ in range(2))
    assert one.nonce != two.nonce
    assert one.ciphertext != two.ciphertext


def test_a_wrong_key_with_the_same_id_fails_authentication() -> None:
    key = make_key()
    sealed = seal(key, PLAINTEXT, associated=bound(key))
    impostor = AgentKey(key.agent_id, key.key_id, new_secret())
    assert unreadable(impostor, sealed, bound(key)) == AUTHENTICATION_FAILED


def test_a_key_with_another_id_is_refused_before_decrypting() -> None:
    key = make_key()
    sealed = seal(key, PLAINTEXT, associated=bound(key))
    # A new key of the same agent, as after a forget: the old entries stay unreadable.
    assert unreadable(make_key(key.agent_id), sealed, bound(key)) == KEY_MISMATCH


@pytest.mark.parametrize("index", [0, 5, -1])
def test_tampered_ciphertext_fails(index: int) -> None:
    key = make_key()
    sealed = seal(key, PLAINTEXT, associated=bound(key))
    at = index % len(sealed.ciphertext)
    tampered = dataclasses.replace(sealed, ciphertext=flip(sealed.ciphertext, at))
    assert unreadable(key, tampered, bound(key)) == AUTHENTICATION_FAILED


def test_a_truncated_ciphertext_fails() -> None:
    key = make_key()
    sealed = seal(key, PLAINTEXT, associated=bound(key))
    cut = dataclasses.replace(sealed, ciphertext=sealed.ciphertext[:-1])
    assert unreadable(key, cut, bound(key)) == AUTHENTICATION_FAILED
    assert unreadable(key, dataclasses.replace(sealed, ciphertext=b"x"), bound(key)) == (
        MALFORMED_PAYLOAD
    )


def test_a_tampered_nonce_fails() -> None:
    key = make_key()
    sealed = seal(key, PLAINTEXT, associated=bound(key))
    assert unreadable(key, dataclasses.replace(sealed, nonce=flip(sealed.nonce)), bound(key)) == (
        AUTHENTICATION_FAILED
    )
    short = dataclasses.replace(sealed, nonce=sealed.nonce[:8])
    assert unreadable(key, short, bound(key)) == MALFORMED_PAYLOAD


def test_an_entry_moved_to_another_position_fails() -> None:
    key = make_key()
    sealed = seal(key, PLAINTEXT, associated=bound(key, seq=7))
    assert unreadable(key, sealed, bound(key, seq=8)) == AUTHENTICATION_FAILED
    assert unreadable(key, sealed, flip(bound(key, seq=7))) == AUTHENTICATION_FAILED


def test_an_entry_moved_to_another_agent_fails() -> None:
    key_a = make_key("a")
    sealed = seal(key_a, PLAINTEXT, associated=bound(key_a))
    # Even an agent given the very same secret and key id cannot read it under its name.
    twin = AgentKey("b", key_a.key_id, key_a.secret)
    assert unreadable(twin, sealed, bound(twin)) == AUTHENTICATION_FAILED
    # And with its own key, the key id alone tells.
    key_b = make_key("b")
    assert unreadable(key_b, sealed, bound(key_b)) == KEY_MISMATCH


def test_different_agents_seal_the_same_bytes_differently() -> None:
    key_a, key_b = make_key("a"), make_key("b")
    one = seal(key_a, PLAINTEXT, associated=bound(key_a))
    two = seal(key_b, PLAINTEXT, associated=bound(key_b))
    assert one.ciphertext != two.ciphertext
    assert open_sealed(key_b, two, associated=bound(key_b)) == PLAINTEXT


def test_the_wire_form_round_trips_as_strings() -> None:
    key = make_key()
    sealed = seal(key, PLAINTEXT, associated=bound(key))
    wire = sealed.to_wire()
    assert set(wire) == {"key_id", "nonce", "payload"}
    assert all(isinstance(value, str) for value in wire.values())
    assert SealedPayload.from_wire(wire) == sealed


@pytest.mark.parametrize(
    "wire",
    [
        {"nonce": "AAAA", "payload": "AAAA"},
        {"key_id": "k", "nonce": "not base64!", "payload": "AAAA"},
        {"key_id": "k", "nonce": "AAAA", "payload": 12},
    ],
)
def test_a_malformed_wire_form_is_unreadable(wire: dict[str, object]) -> None:
    with pytest.raises(PayloadUnreadable) as caught:
        SealedPayload.from_wire(wire)
    assert caught.value.reason == MALFORMED_PAYLOAD


def test_the_error_is_typed_under_grimoire_error() -> None:
    error = PayloadUnreadable(AUTHENTICATION_FAILED, "detail")
    assert isinstance(error, AgentsError)
    assert isinstance(error, GrimoireError)
    assert (error.reason, error.detail) == (AUTHENTICATION_FAILED, "detail")


def test_a_key_never_shows_its_secret() -> None:
    key = make_key()
    assert key.secret.hex() not in repr(key)
    assert repr(key.secret) not in repr(key)
    assert key.key_id in repr(key)
    assert "secret" not in repr(key)


def test_a_key_of_the_wrong_length_is_refused() -> None:
    short = AgentKey("a", "k", b"0" * 16)
    with pytest.raises(ValueError):
        seal(short, PLAINTEXT, associated=b"")
