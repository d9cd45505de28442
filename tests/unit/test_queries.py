"""grimoire.tables.queries and index_schema: exact query strings and the index schema."""

from __future__ import annotations

import pytest

from grimoire.streams.records import (
    EventType,
    Kind,
    Layer,
    MemoryCandidate,
    MemoryRecord,
    Provenance,
)
from grimoire.tables.index_schema import memory_schema, memory_schema_dict
from grimoire.tables.memory_store import _hash_fields
from grimoire.tables.queries import FullTextQuery, escape_tag, tenant_filter


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain_1", "plain_1"),
        ("agent-1", "agent\\-1"),
        ("a b", "a\\ b"),
        ("config.yaml", "config\\.yaml"),
        ("x:y", "x\\:y"),
        ("{t}|", "\\{t\\}\\|"),
        ("don't", "don\\'t"),
        ("a\\b", "a\\\\b"),
        ("", ""),
    ],
)
def test_escape_tag(raw: str, escaped: str) -> None:
    assert escape_tag(raw) == escaped


def test_tenant_filter() -> None:
    assert str(tenant_filter("agent1")) == "@agent_id:{agent1}"
    assert str(tenant_filter("agent-1")) == "@agent_id:{agent\\-1}"


def test_tenant_filter_requires_an_agent() -> None:
    with pytest.raises(ValueError):
        tenant_filter("")


def test_full_text_plain_terms() -> None:
    query = FullTextQuery("agent1", ("disk", "full"), 10)
    assert query.query_string() == "@agent_id:{agent1} @text:(disk|full)"


def test_full_text_escapes_agent_and_terms() -> None:
    query = FullTextQuery("agent-1", ("config.yaml", "don't", "node"), 5)
    assert query.query_string() == "@agent_id:{agent\\-1} @text:(config\\.yaml|don\\'t|node)"


def test_full_text_single_term() -> None:
    assert FullTextQuery("a", ("x",), 1).query_string() == "@agent_id:{a} @text:(x)"


def test_full_text_without_terms_is_only_the_tenant_filter() -> None:
    assert FullTextQuery("agent-1", (), 10).query_string() == "@agent_id:{agent\\-1}"


def test_full_text_without_agent_raises() -> None:
    with pytest.raises(ValueError):
        FullTextQuery("", ("disk",), 10).query_string()


def test_memory_schema_names() -> None:
    schema = memory_schema("p")
    assert schema.index.name == "p-memory"
    assert schema.index.prefix == "p:mem"
    assert schema.index.key_separator == ":"
    assert schema.index.storage_type.value == "hash"


def test_memory_schema_vector_field() -> None:
    canonical = memory_schema("p").fields["canonical"]
    assert canonical.type == "vector"
    assert canonical.attrs.dims == 384
    assert str(canonical.attrs.distance_metric.value).lower() == "cosine"
    assert memory_schema("p", dims=16).fields["canonical"].attrs.dims == 16


def test_memory_schema_tenant_and_text_fields() -> None:
    fields = memory_schema("grimoire").fields
    assert fields["agent_id"].type == "tag"
    assert fields["text"].type == "text"
    assert fields["ts"].type == "numeric"
    assert fields["tags"].attrs.separator == "|"


def test_memory_schema_dict_is_fresh_per_call() -> None:
    first = memory_schema_dict("one", 8)
    second = memory_schema_dict("two", 32)
    assert (first["index"]["name"], second["index"]["name"]) == ("one-memory", "two-memory")
    dims = [f["attrs"]["dims"] for f in first["fields"] if f["type"] == "vector"]
    assert dims == [8]


def test_every_indexed_field_is_written_by_the_store() -> None:
    candidate = MemoryCandidate(
        id="0194-x",
        agent_id="agent-1",
        kind=Kind.EPISODE,
        layer=Layer.OBSERVATION,
        text="disk full",
        ts_ms=1_767_225_600_000,
        provenance=Provenance(source_event_id="ev-1", event_type=EventType.EPISODE.value),
        normalized_hash="h",
        tick=3,
        block=4,
        tags=("a", "b"),
    )
    written = _hash_fields(MemoryRecord(candidate, (0.0,) * 4), 0)
    indexed = {field["name"] for field in memory_schema_dict("p", 4)["fields"]}
    assert indexed <= set(written)
    assert written["tags"] == "a|b"
