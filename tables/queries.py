"""Query value objects. Every query is built here, and every one of them starts with
the tenant filter, so no caller can forget it.
"""

from __future__ import annotations

from dataclasses import dataclass

from redisvl.query.filter import Tag

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
        tenant = str(tenant_filter(self.agent_id))
        if not self.terms:
            return tenant
        alternatives = "|".join(escape_tag(term) for term in self.terms)
        return f"{tenant} @text:({alternatives})"
