"""The journal payload cipher: AES-256-GCM with the agent's own key.

The sequencing stage seals each input's bytes with its agent's current key before
appending it to the journal; the apply loop opens it with the key the entry names.
Forgetting an agent destroys its keys (`grimoire.tables.journal.keystore`), so its
entries stay in the log but can no longer be read (crypto-shredding).

AES-GCM is authenticated: a payload opened with another key, or whose nonce,
ciphertext or associated data changed by one bit, fails to open instead of
decrypting to garbage. The associated data is the entry's binding, in the clear but
authenticated: pass `grimoire.streams.journal.entry.associated_data(agent_id,
key_id, seq)`, so a sealed payload copied to another agent or another place in the
sequence does not open there.

The primitive is the `cryptography` library's `AESGCM` (OpenSSL underneath): a
well-kept, audited AEAD, never one of our own. Nonces are 12 random bytes per
payload; under one key that stays safe for about 2**32 payloads (NIST SP 800-38D),
far beyond one agent's journal.

Wire form (`SealedPayload.to_wire`): a dict of strings, the nonce and ciphertext in
standard base64 (RFC 4648 §4, padded):
  {"key_id": "<key id>", "nonce": "<12 bytes>", "payload": "<ciphertext + 16-byte tag>"}
the same field names the journal envelope uses (`streams/journal/entry.py`).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from grimoire.agents.exceptions import PayloadUnreadable
from grimoire.tables.journal.keystore import KEY_BYTES, AgentKey

__all__ = [
    "AUTHENTICATION_FAILED",
    "KEY_FORGOTTEN",
    "KEY_MISMATCH",
    "MALFORMED_PAYLOAD",
    "NONCE_BYTES",
    "TAG_BYTES",
    "SealedPayload",
    "open_sealed",
    "seal",
]

NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16

# `PayloadUnreadable.reason`s, for dead letters.
#: The entry's key was destroyed: its agent was forgotten (raised by callers that
#: find no key for the entry's key id).
KEY_FORGOTTEN: Final = "key_forgotten"
#: The payload names another key than the one given.
KEY_MISMATCH: Final = "key_mismatch"
#: Wrong key, or ciphertext, nonce or associated data altered.
AUTHENTICATION_FAILED: Final = "authentication_failed"
#: Not a sealed payload at all (bad base64, wrong nonce length, too short).
MALFORMED_PAYLOAD: Final = "malformed_payload"


@dataclass(frozen=True, slots=True)
class SealedPayload:
    """A payload sealed with one of an agent's keys. `ciphertext` ends with GCM's
    16-byte tag."""

    key_id: str
    nonce: bytes
    ciphertext: bytes

    def to_wire(self) -> dict[str, str]:
        return {
            "key_id": self.key_id,
            "nonce": base64.b64encode(self.nonce).decode("ascii"),
            "payload": base64.b64encode(self.ciphertext).decode("ascii"),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> SealedPayload:
        """The inverse of `to_wire`; `PayloadUnreadable(MALFORMED_PAYLOAD)` on bad input."""
        try:
            key_id, nonce, payload = data["key_id"], data["nonce"], data["payload"]
            if not all(isinstance(v, str) for v in (key_id, nonce, payload)):
                raise TypeError("key_id, nonce and payload must be strings")
            return cls(
                key_id=key_id,
                nonce=base64.b64decode(nonce, validate=True),
                ciphertext=base64.b64decode(payload, validate=True),
            )
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise PayloadUnreadable(MALFORMED_PAYLOAD, repr(exc)) from exc


def _cipher(key: AgentKey) -> AESGCM:
    if len(key.secret) != KEY_BYTES:
        raise ValueError(f"an agent key is {KEY_BYTES} bytes, not {len(key.secret)}")
    return AESGCM(key.secret)


def seal(key: AgentKey, plaintext: bytes, *, associated: bytes) -> SealedPayload:
    """Encrypt and authenticate `plaintext` under `key`, bound to `associated`."""
    nonce = os.urandom(NONCE_BYTES)
    return SealedPayload(key.key_id, nonce, _cipher(key).encrypt(nonce, plaintext, associated))


def open_sealed(key: AgentKey, sealed: SealedPayload, *, associated: bytes) -> bytes:
    """The plaintext of `sealed`; `PayloadUnreadable` when it was sealed with another
    key, or its bytes or `associated` are not exactly what was sealed."""
    if sealed.key_id != key.key_id:
        raise PayloadUnreadable(
            KEY_MISMATCH,
            f"sealed with key {sealed.key_id!r}, given key {key.key_id!r} of {key.agent_id!r}",
        )
    if len(sealed.nonce) != NONCE_BYTES or len(sealed.ciphertext) < TAG_BYTES:
        raise PayloadUnreadable(
            MALFORMED_PAYLOAD,
            f"nonce of {len(sealed.nonce)} bytes, ciphertext of {len(sealed.ciphertext)}",
        )
    try:
        return _cipher(key).decrypt(sealed.nonce, sealed.ciphertext, associated)
    except InvalidTag as exc:
        raise PayloadUnreadable(
            AUTHENTICATION_FAILED,
            f"key {key.key_id!r} of {key.agent_id!r}: wrong key, or payload or binding altered",
        ) from exc
