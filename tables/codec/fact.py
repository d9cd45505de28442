"""A fact version as stored (`Keyspace.facts`), and the id lists and links of
its indexes: JSON with sorted keys, so equal facts are equal bytes (digests).
`confidence` is stored only when it is not 1.0 (an inherited version's), so an
agent's own facts are the bytes they always were."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from grimoire.streams.facts.exceptions import InvalidFact
from grimoire.streams.facts.values import Closure, Fact
from grimoire.tables.exceptions import CorruptRecord

__all__ = [
    "decode_fact",
    "decode_ids",
    "decode_links",
    "encode_fact",
    "encode_ids",
    "encode_links",
    "fact_to_json",
    "pair_field",
]

_OPTIONS = orjson.OPT_SORT_KEYS


def pair_field(subject: str, predicate: str) -> str:
    """The `fact_pairs` field of a relation (entity names hold no control characters)."""
    return f"{subject}\x1f{predicate}"


def fact_to_json(fact: Fact) -> dict[str, Any]:
    data: dict[str, Any] = {
        "fact_id": fact.fact_id,
        "agent_id": fact.agent_id,
        "subject": fact.subject,
        "predicate": fact.predicate,
        "object": fact.object,
        "object_is_entity": fact.object_is_entity,
        "valid_from": fact.valid_from,
        "known_from": fact.known_from_ms,
        "source_event_id": fact.source_event_id,
        "order": fact.order,
        "born_until": fact.born_until,
        "closures": [[c.at_ms, c.valid_until, c.by] for c in fact.closures],
    }
    if fact.confidence != 1.0:
        data["confidence"] = fact.confidence
    return data


def encode_fact(fact: Fact) -> bytes:
    return orjson.dumps(fact_to_json(fact), option=_OPTIONS)


def decode_fact(raw: bytes | str) -> Fact:
    try:
        data = orjson.loads(raw)
        return Fact(
            fact_id=str(data["fact_id"]),
            agent_id=str(data["agent_id"]),
            subject=str(data["subject"]),
            predicate=str(data["predicate"]),
            object=str(data["object"]),
            object_is_entity=bool(data["object_is_entity"]),
            valid_from=int(data["valid_from"]),
            known_from_ms=int(data["known_from"]),
            source_event_id=str(data["source_event_id"]),
            order=int(data["order"]),
            born_until=None if data["born_until"] is None else int(data["born_until"]),
            closures=tuple(Closure(int(a), int(u), str(b)) for a, u, b in data["closures"]),
            confidence=float(data.get("confidence", 1.0)),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, InvalidFact) as exc:
        raise CorruptRecord(f"stored fact is unreadable: {exc!r}") from exc


def encode_ids(ids: Sequence[str]) -> bytes:
    return orjson.dumps(sorted(set(ids)))


def decode_ids(raw: bytes | str | None) -> list[str]:
    if raw is None:
        return []
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptRecord(f"stored fact index is not JSON: {exc}") from exc
    if not isinstance(data, list):
        raise CorruptRecord("stored fact index is not a list")
    return [str(item) for item in data]


def encode_links(links: Sequence[tuple[str, str]]) -> bytes:
    return orjson.dumps([list(pair) for pair in sorted(set(links))])


def decode_links(raw: bytes | str | None) -> list[tuple[str, str]]:
    if raw is None:
        return []
    try:
        data = orjson.loads(raw)
        return [(str(key), str(fact_id)) for key, fact_id in data]
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise CorruptRecord(f"stored fact links are unreadable: {exc!r}") from exc
