"""Reading FT.SEARCH replies whichever form they come in: redis-py `Result`
objects, RESP3 maps, or raw RESP2 arrays from pipelined `execute_command`."""

from __future__ import annotations

from typing import Any

from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import RETURN_FIELDS


def docs(result: Any, *, with_scores: bool = False) -> list[Any]:
    """The documents of a reply. Raw RESP2 with scores comes back as
    (score, fields) pairs, so `doc_score` and `doc_fields` read either shape."""
    if isinstance(result, dict):  # RESP3
        return list(result.get("results", result.get(b"results", [])))
    if isinstance(result, list):  # raw RESP2: [total, id, (score,) [fields], ...]
        stride = 3 if with_scores else 2
        rows = []
        for start in range(1, len(result), stride):
            row = result[start : start + stride]
            if len(row) < stride:
                break
            rows.append((row[1], row[2]) if with_scores else row[1])
        return rows
    return list(result.docs)


def keyed_docs(result: Any) -> list[tuple[str, dict[str, Any]]]:
    """(document key, returned fields) of each document of a reply without scores.

    On a Redis Cluster a search loads no field of a document outside the slot of
    its index's name (`grimoire.tables.routing`): ask only for what the query
    computes (a KNN distance) or what is SORTABLE, and read the rest from the
    hashes by these keys."""
    if isinstance(result, dict):  # RESP3
        rows = result.get("results", result.get(b"results", []))
        found = []
        for row in rows:
            extra = row.get("extra_attributes", row.get(b"extra_attributes")) or {}
            key = text_of(row.get("id", row.get(b"id")))
            found.append((key, {text_of(k): v for k, v in extra.items()}))
        return found
    if isinstance(result, list):  # raw RESP2: [total, key, [fields], ...]
        return [
            (text_of(result[i]), doc_fields(result[i + 1] or []))
            for i in range(1, len(result) - 1, 2)
        ]
    return [(doc.id, doc_fields(doc)) for doc in result.docs]


def doc_fields(doc: Any) -> dict[str, Any]:
    if isinstance(doc, dict):
        extra = doc.get("extra_attributes", doc.get(b"extra_attributes")) or {}
        return {text_of(k): v for k, v in extra.items()}
    if isinstance(doc, tuple):  # (score, fields) from a raw reply with scores
        return doc_fields(doc[1])
    if isinstance(doc, list):
        return {text_of(doc[i]): doc[i + 1] for i in range(0, len(doc) - 1, 2)}
    return {name: getattr(doc, name) for name in RETURN_FIELDS if hasattr(doc, name)}


def doc_score(doc: Any) -> float:
    if isinstance(doc, dict):  # RESP3; keys are bytes unless the client decodes
        return float(text_of(doc["score"] if "score" in doc else doc[b"score"]))
    if isinstance(doc, tuple):
        return float(text_of(doc[0]))
    return float(doc.score)


def scored_keys(result: Any) -> list[tuple[str, float]]:
    """(document key, score) of a NOCONTENT WITHSCORES reply, in either protocol."""
    if isinstance(result, dict):  # RESP3
        rows = result.get("results", result.get(b"results", []))
        return [
            (
                text_of(row.get("id", row.get(b"id"))),
                float(text_of(row.get("score", row.get(b"score")))),
            )
            for row in rows
        ]
    if isinstance(result, list):  # RESP2: [total, key, score, key, score, ...]
        return [
            (text_of(result[i]), float(text_of(result[i + 1])))
            for i in range(1, len(result) - 1, 2)
        ]
    return []


def nocontent_keys(reply: Any) -> list[str]:
    """Document keys of an FT.SEARCH NOCONTENT reply (no scores), in either protocol."""
    if isinstance(reply, dict):  # RESP3
        rows: list[Any] = list(reply.get("results", reply.get(b"results")) or [])
        return [text_of(row.get("id", row.get(b"id"))) for row in rows]
    if isinstance(reply, list):  # RESP2: [total, key, key, ...]
        return [text_of(key) for key in reply[1:]]
    return [doc.id for doc in reply.docs]


def total_results(reply: Any) -> int:
    """The match count of a reply: a redis-py `Result`, a RESP3 map (str or bytes
    keys: raw `execute_command` replies keep bytes) or a raw RESP2 array."""
    if isinstance(reply, dict):
        found = reply.get("total_results", reply.get(b"total_results"))
        return 0 if found is None else int(found)
    if hasattr(reply, "total"):
        return int(reply.total)
    return int(reply[0])
