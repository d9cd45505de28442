"""grimoire.tables.queries and index_schema: exact query strings and the index schema."""

from __future__ import annotations

import numpy as np
import pytest

from grimoire.streams.inbound.validators import InputLimits, is_agent_id
from grimoire.streams.model.records import Kind
from grimoire.tables.codec.memory_hash import hash_fields
from grimoire.tables.memory.store import schema_differences
from grimoire.tables.queries import (
    FullTextQuery,
    KnnQuery,
    escape_tag,
    live_filter,
    tenant_filter,
)
from grimoire.tables.schema.memory_index import memory_schema, memory_schema_dict
from tests.support.builders import memory_candidate, memory_record


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


# A record is live (recallable) unless it is deleted, quarantined or archived; a hash that lacks
# either field is live too, which is why both are negated matches.
LIVE_1 = "(((@agent_id:{agent1} (-@deleted:{1})) (-@quarantined:{1})) (-@archived:{1}))"
LIVE_DASH = "(((@agent_id:{agent\\-1} (-@deleted:{1})) (-@quarantined:{1})) (-@archived:{1}))"


def test_live_filter() -> None:
    assert str(live_filter("agent1")) == LIVE_1
    assert str(live_filter("agent-1")) == LIVE_DASH


def test_live_filter_requires_an_agent() -> None:
    with pytest.raises(ValueError):
        live_filter("")


def test_full_text_plain_terms() -> None:
    query = FullTextQuery("agent1", ("disk", "full"), 10)
    assert query.query_string() == f"{LIVE_1} @lexical:(disk|full)"


def test_full_text_escapes_agent_and_terms() -> None:
    query = FullTextQuery("agent-1", ("config.yaml", "don't", "node"), 5)
    assert query.query_string() == (
        "(((@agent_id:{agent\\-1} (-@deleted:{1})) (-@quarantined:{1})) (-@archived:{1}))"
        " @lexical:(config\\.yaml|don\\'t|node)"
    )


def test_full_text_single_term() -> None:
    assert FullTextQuery("a", ("x",), 1).query_string() == (
        "(((@agent_id:{a} (-@deleted:{1})) (-@quarantined:{1})) (-@archived:{1})) @lexical:(x)"
    )


def test_full_text_without_terms_is_only_the_live_filter() -> None:
    assert FullTextQuery("agent-1", (), 10).query_string() == LIVE_DASH


def test_full_text_without_agent_raises() -> None:
    with pytest.raises(ValueError):
        FullTextQuery("", ("disk",), 10).query_string()


def test_knn_query_string() -> None:
    query = KnnQuery("agent-1", "eidolon", 3, ("memory_id",))
    assert query.query_string() == (
        "((((@agent_id:{agent\\-1} (-@deleted:{1})) (-@quarantined:{1})) (-@archived:{1})))"
        "=>[KNN 3 @eidolon $vec AS distance]"
    )


def test_knn_query_arguments() -> None:
    vector = np.ones(4, dtype=np.float32).tobytes()
    query = KnnQuery("agent1", "canonical", 1, ("memory_id", "kind"))
    assert query.arguments(vector) == [
        f"({LIVE_1})=>[KNN 1 @canonical $vec AS distance]",
        "PARAMS",
        2,
        "vec",
        vector,
        "RETURN",
        3,
        "memory_id",
        "kind",
        "distance",
        "SORTBY",
        "distance",
        "ASC",
        "LIMIT",
        0,
        1,
        "DIALECT",
        2,
    ]


def test_knn_query_without_agent_raises() -> None:
    with pytest.raises(ValueError):
        KnnQuery("", "canonical", 1, ()).query_string()


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


def test_memory_schema_eidolon_lane_matches_canonical() -> None:
    eidolon = memory_schema("p", dims=16).fields["eidolon"]
    assert eidolon.type == "vector"
    assert eidolon.attrs.dims == 16
    assert str(eidolon.attrs.distance_metric.value).lower() == "cosine"


def test_memory_schema_live_filter_fields_are_tags() -> None:
    fields = memory_schema("p").fields
    assert (fields["deleted"].type, fields["quarantined"].type) == ("tag", "tag")


def test_memory_schema_tenant_and_text_fields() -> None:
    fields = memory_schema("grimoire").fields
    assert fields["agent_id"].type == "tag"
    assert fields["lexical"].type == "text"
    assert fields["lexical"].attrs.no_stem is True
    assert "text" not in fields  # the lexical form is indexed, not the text
    assert fields["ts"].type == "numeric"
    assert fields["tags"].attrs.separator == "|"
    # The tenant boundary is exact: no case folding, and split only on a character
    # that no valid agent id holds (streams/inbound/validators.py).
    assert fields["agent_id"].attrs.case_sensitive is True
    assert fields["agent_id"].attrs.separator == "|"
    assert not is_agent_id("a|b", InputLimits())


def test_memory_schema_dict_is_fresh_per_call() -> None:
    first = memory_schema_dict("one", 8)
    second = memory_schema_dict("two", 32)
    assert (first["index"]["name"], second["index"]["name"]) == ("one-memory", "two-memory")
    dims = [f["attrs"]["dims"] for f in first["fields"] if f["type"] == "vector"]
    assert dims == [8, 8]  # canonical and eidolon lanes


def test_every_indexed_field_is_written_by_the_store() -> None:
    candidate = memory_candidate(
        "agent-1",
        "ev-1",
        "disk full",
        ts=1_767_225_600_000,
        id="0194-x",
        normalized_hash="h",
        tick=3,
        block=4,
        tags=("a", "b"),
    )
    vector = np.zeros(4, dtype=np.float32).tobytes()
    written = hash_fields(memory_record(candidate, vector), 0)
    indexed = {field["name"] for field in memory_schema_dict("p", 4)["fields"]}
    assert indexed <= set(written)
    assert written["tags"] == "a|b"
    assert (written["deleted"], written["quarantined"]) == ("0", "0")
    assert written["canonical"] == written["eidolon"] == vector


def test_a_record_without_eidolon_writes_no_eidolon_field() -> None:
    candidate = memory_candidate(
        "agent-1", "ev-1", "disk full", ts=1, kind=Kind.AGGREGATE, id="0194-y", normalized_hash="h"
    )
    record = memory_record(
        candidate, b"\0" * 16, eidolon=b"", quarantined=True, aggregate_of="0194-x"
    )
    written = hash_fields(record, 7)
    assert "eidolon" not in written
    assert "tick" not in written
    assert (written["quarantined"], written["aggregate_of"], written["recorded_at"]) == (
        "1",
        "0194-x",
        7,
    )


def test_recall_filter_adds_every_provenance_filter_to_the_live_filter() -> None:
    from grimoire.streams.recall.options import ProvenanceFilters
    from grimoire.tables.queries import recall_filter

    filters = ProvenanceFilters(
        since_ms=5,
        until_ms=9,
        session_id="s.1",
        run_id="r",
        actor_id="bob",
        event_type_prefix="tool",
        kinds=("episode", "summary"),
        layers=("input",),
    )
    assert str(recall_filter("a-1", filters)) == (
        "(((((((((((@agent_id:{a\\-1} (-@deleted:{1})) (-@quarantined:{1})) (-@archived:{1}))"
        " @ts:[5 +inf])"
        " @ts:[-inf 9]) @session_id:{s\\.1}) @run_id:{r}) @actor_id:{bob})"
        " @event_type:{tool*}) @kind:{episode|summary}) @layer:{input})"
    )
    assert str(recall_filter("a", ProvenanceFilters())) == str(live_filter("a"))


def test_knn_and_full_text_queries_carry_the_filters() -> None:
    from grimoire.streams.recall.options import ProvenanceFilters

    only = ProvenanceFilters(kinds=("insight",))
    knn = KnnQuery("a", "eidolon", 30, ("memory_id",), only).query_string()
    assert knn == (
        "(((((@agent_id:{a} (-@deleted:{1})) (-@quarantined:{1})) (-@archived:{1}))"
        " @kind:{insight}))"
        "=>[KNN 30 @eidolon $vec AS distance]"
    )
    text = FullTextQuery("a", ("disk", "full"), 5, only).query_string()
    assert text.endswith("@kind:{insight}) @lexical:(disk|full)")


def _live_attributes(prefix: str = "p") -> list[list[object]]:
    """FT.INFO `attributes` as Redis 8.2 reports the index memory_index.yaml creates."""
    rows: list[list[object]] = []
    for name, field in memory_schema(prefix, 8).fields.items():
        kind = str(getattr(field.type, "value", field.type)).upper()
        row: list[object] = ["identifier", name, "attribute", name, "type", kind]
        if kind == "TAG":
            row += ["SEPARATOR", field.attrs.separator]
            if field.attrs.case_sensitive:
                row.append("CASESENSITIVE")
        rows.append(row)
    return rows


def test_an_index_like_the_schema_has_no_differences() -> None:
    assert schema_differences(memory_schema("p", 8), _live_attributes()) == []
    as_bytes = [
        [v.encode() if isinstance(v, str) else v for v in row] for row in _live_attributes()
    ]
    assert schema_differences(memory_schema("p", 8), as_bytes) == []


def test_an_index_from_before_the_exact_tenant_tag_differs() -> None:
    # As FT.INFO reported an index created by the previous memory_index.yaml.
    old = [
        ["identifier", "agent_id", "attribute", "agent_id", "type", "TAG", "SEPARATOR", ","]
        if row[1] == "agent_id"
        else row
        for row in _live_attributes()
    ]
    assert schema_differences(memory_schema("p", 8), old) == [
        "agent_id splits on ',', not '|'",
        "agent_id is not case-sensitive",
    ]


def test_missing_extra_and_retyped_fields_differ() -> None:
    rows = [row for row in _live_attributes() if row[1] != "tick"]
    rows.append(["identifier", "extra", "attribute", "extra", "type", "TAG", "SEPARATOR", ","])
    rows = [
        ["identifier", "ts", "attribute", "ts", "type", "TAG"] if row[1] == "ts" else row
        for row in rows
    ]
    assert schema_differences(memory_schema("p", 8), rows) == [
        "extra is not in the schema",
        "ts is tag, not numeric",
        "tick is missing",
    ]


def test_a_brute_force_knn_names_no_hnsw_walk() -> None:
    # RediSearch refuses EF_RUNTIME beside ADHOC_BF: every recall failed with it.
    brute = KnnQuery("agent-1", "canonical", 3, (), ef_runtime=200, hybrid_policy="ADHOC_BF")
    assert "EF_RUNTIME" not in brute.query_string()
    assert "HYBRID_POLICY ADHOC_BF" in brute.query_string()
    walked = KnnQuery("agent-1", "canonical", 3, (), ef_runtime=200, hybrid_policy="BATCHES")
    assert "EF_RUNTIME 200" in walked.query_string()
