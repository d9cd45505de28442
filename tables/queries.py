"""Query value objects. Every query is built here, and every one of them starts with
the tenant filter, so no caller can forget it.
"""

from __future__ import annotations

from dataclasses import dataclass

from redisvl.query.filter import FilterExpression, Tag

_TAG_SPECIAL = set(",.<>{}[]\"':;!@#$%^&*()-+=~|/\\ ?")


def escape_tag(value: str) -> str:
    return "".join(f"\\{ch}" if ch in _TAG_SPECIAL else ch for ch in value)


def tenant_filter(agent_id: str) -> Tag:
    if not agent_id:
        raise ValueError("every memory query needs an agent_id")
    return Tag("agent_id") == agent_id


@dataclass(frozen=True, slots=True)
class FullTextQuery:
    """BM25 over `text` for one agent: any of the terms may match."""

    agent_id: str
    terms: tuple[str, ...]
    k: int

    def query_string(self) -> str:
        live = str(live_filter(self.agent_id))
        if not self.terms:
            return live
        alternatives = "|".join(escape_tag(term) for term in self.terms)
        return f"{live} @text:({alternatives})"


def live_filter(agent_id: str) -> FilterExpression:
    """The agent's memories that recall may return: not deleted, not quarantined."""
    return tenant_filter(agent_id) & (Tag("deleted") != "1") & (Tag("quarantined") != "1")


@dataclass(frozen=True, slots=True)
class KnnQuery:
    """Top-k of one vector lane among one agent's live memories (raw FT.SEARCH arguments)."""

    agent_id: str
    lane: str
    k: int
    return_fields: tuple[str, ...]

    def query_string(self) -> str:
        return f"({live_filter(self.agent_id)})=>[KNN {self.k} @{self.lane} $vec AS distance]"

    def arguments(self, vector: bytes) -> list[str | bytes | int]:
        fields = (*self.return_fields, "distance")
        return [
            self.query_string(),
            "PARAMS",
            2,
            "vec",
            vector,
            "RETURN",
            len(fields),
            *fields,
            "SORTBY",
            "distance",
            "ASC",
            "LIMIT",
            0,
            self.k,
            "DIALECT",
            2,
        ]
