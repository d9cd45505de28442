"""Query value objects. Every query is built here, and every one of them starts with
the tenant filter, so no caller can forget it.
"""

from __future__ import annotations

from dataclasses import dataclass

from redisvl.query.filter import FilterExpression, Num, Tag

from grimoire.streams.recall.options import NO_FILTERS, ProvenanceFilters


def _needs_escape(ch: str) -> bool:
    # Every ASCII character but letters, digits and `_` (a superset of RediSearch's
    # list of special characters, so a character it adds later is escaped too), and
    # any whitespace: escaping a character that needs none matches it literally.
    return (ch.isascii() and not (ch.isalnum() or ch == "_")) or ch.isspace()


def escape_tag(value: str) -> str:
    return "".join(f"\\{ch}" if _needs_escape(ch) else ch for ch in value)


def tenant_filter(agent_id: str) -> FilterExpression:
    """Exactly one agent's records. The `agent_id` TAG is case-sensitive with a
    separator no valid agent id holds (tables/schema/memory_index.yaml), and the
    value is escaped here rather than by redisvl, so `TENV1`, `tenV1` and
    `tenV2,evil` are three tenants and `,` or `|` in a value never splits it into
    alternatives. Readers still check the owner of what they get back."""
    if not agent_id:
        raise ValueError("every memory query needs an agent_id")
    return FilterExpression(f"@agent_id:{{{escape_tag(agent_id)}}}")


@dataclass(frozen=True, slots=True)
class FullTextQuery:
    """BM25 over `text` for one agent: any of the terms may match."""

    agent_id: str
    terms: tuple[str, ...]
    k: int
    filters: ProvenanceFilters = NO_FILTERS

    def query_string(self) -> str:
        live = str(recall_filter(self.agent_id, self.filters))
        if not self.terms:
            return live
        alternatives = "|".join(escape_tag(term) for term in self.terms)
        return f"{live} @lexical:({alternatives})"


def live_filter(agent_id: str) -> FilterExpression:
    """The agent's memories that recall may return: not deleted, quarantined or archived."""
    return (
        tenant_filter(agent_id)
        & (Tag("deleted") != "1")
        & (Tag("quarantined") != "1")
        & (Tag("archived") != "1")
    )


def recall_filter(agent_id: str, filters: ProvenanceFilters = NO_FILTERS) -> FilterExpression:
    """The live filter narrowed by a request's provenance filters: every lane runs
    the same expression, so the lanes and the walk agree on what may come back."""
    expression = live_filter(agent_id)
    if filters.since_ms is not None:
        expression &= Num("ts") >= filters.since_ms
    if filters.until_ms is not None:
        expression &= Num("ts") <= filters.until_ms
    for name, value in (
        ("session_id", filters.session_id),
        ("run_id", filters.run_id),
        ("actor_id", filters.actor_id),
    ):
        if value:
            expression &= Tag(name) == value
    if filters.event_type_prefix:
        expression &= FilterExpression(f"@event_type:{{{escape_tag(filters.event_type_prefix)}*}}")
    if filters.kinds:
        expression &= Tag("kind") == list(filters.kinds)
    if filters.layers:
        expression &= Tag("layer") == list(filters.layers)
    return expression


@dataclass(frozen=True, slots=True)
class KnnQuery:
    """Top-k of one vector lane among one agent's live memories (raw FT.SEARCH arguments)."""

    agent_id: str
    lane: str
    k: int
    return_fields: tuple[str, ...]
    filters: ProvenanceFilters = NO_FILTERS
    ef_runtime: int | None = None
    # BATCHES walks the HNSW graph and filters as it goes. RediSearch otherwise
    # picks exact brute force for our tenant + lifecycle filter, which costs
    # ~50 ms at 100,000 memories against ~1 ms (measured in `make bench-recall`).
    # A selective provenance filter is left to RediSearch's own choice.
    hybrid_policy: str | None = None

    def query_string(self) -> str:
        where = recall_filter(self.agent_id, self.filters)
        options = ""
        # EF_RUNTIME tunes the HNSW walk; RediSearch refuses it beside ADHOC_BF (a
        # brute-force scan of the filtered set, no walk).
        brute_force = self.hybrid_policy == "ADHOC_BF" and self.filters.empty
        if self.ef_runtime is not None and not brute_force:
            options += f" EF_RUNTIME {self.ef_runtime}"
        if self.hybrid_policy is not None and self.filters.empty:
            options += f" HYBRID_POLICY {self.hybrid_policy}"
        return f"({where})=>[KNN {self.k} @{self.lane} $vec{options} AS distance]"

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


@dataclass(frozen=True, slots=True)
class AgentMemoriesQuery:
    """One page of every memory hash of one agent, as keys only (NOCONTENT): live,
    deleted, archived and quarantined alike (the tenant filter and nothing else),
    for what must see all of an agent's state (an audit's digest, a forget).
    Callers still check each hash's owner, as every reader does."""

    agent_id: str
    offset: int = 0
    limit: int = 1000

    def query_string(self) -> str:
        return str(tenant_filter(self.agent_id))

    def arguments(self) -> list[str | int]:
        return [self.query_string(), "NOCONTENT", "LIMIT", self.offset, self.limit, "DIALECT", 2]
