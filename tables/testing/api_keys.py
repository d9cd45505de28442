"""The reference `ApiKeyStore`: a dict of records with RedisApiKeyStore's semantics
(only digests stored, revoke keeps the record, list oldest first), for tests
without services. Run by the same contract suite as the Redis one
(tests/integration/test_api_keys_contract.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from grimoire.streams.trust.tenancy import ApiKeyRecord, AuthDecision, TenantScope
from grimoire.tables.trust.api_keys import new_api_key, refusal_fields

__all__ = ["InMemoryApiKeyStore", "InMemoryAuthMetrics"]


class InMemoryApiKeyStore:
    def __init__(self) -> None:
        self._records: dict[str, ApiKeyRecord] = {}
        # How many times `get` was called: tests of the authenticator's cache read it.
        self.reads = 0

    async def create(
        self, scope: TenantScope, label: str, *, now_ms: int
    ) -> tuple[ApiKeyRecord, str]:
        while True:
            record, token = new_api_key(scope, label, now_ms=now_ms)
            if record.key_id not in self._records:
                self._records[record.key_id] = record
                return record, token

    async def get(self, key_id: str) -> ApiKeyRecord | None:
        self.reads += 1
        return self._records.get(key_id)

    async def revoke(self, key_id: str) -> bool:
        record = self._records.get(key_id)
        if record is None:
            return False
        self._records[key_id] = replace(record, revoked=True)
        return True

    async def list(self) -> list[ApiKeyRecord]:
        return sorted(self._records.values(), key=lambda r: (r.created_ms, r.key_id))


class InMemoryAuthMetrics:
    """`AuthMetrics` as a Counter of the fields the Redis one increments."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    async def refused(self, decision: AuthDecision, surface: str) -> None:
        self.counts.update(refusal_fields(decision, surface))
