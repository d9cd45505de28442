"""The memory-hash codec's pins and retraction view (tables/codec/memory_hash.py)
and the edge fields of the derivation index (tables/trust/derivations.py)."""

from __future__ import annotations

import orjson
import pytest

from grimoire.streams.learn.curator.values import EntryStatus
from grimoire.streams.maintenance.compaction import DAY_MS
from grimoire.streams.maintenance.compaction_summary import SummarySource
from grimoire.streams.trust.retraction import DerivationRole, RebuiltSummary, SummaryShape
from grimoire.tables.codec.curator_state import bookkeeping_from_json
from grimoire.tables.codec.memory_hash import (
    candidate_of,
    curated_entry,
    derived_node,
    is_pinned,
    is_retracted,
    pinned_fields,
    quarantined_view,
    rebuilt_summary_fields,
    retracted_fields,
)
from grimoire.tables.exceptions import StorageError
from grimoire.tables.trust.derivations import edge_field, parse_edge_field

T0 = 1_790_000_000_000


def test_pins_and_retraction_flags_round_trip() -> None:
    assert pinned_fields(True) == {"pinned": "1"} and pinned_fields(False) == {"pinned": "0"}
    assert is_pinned({"pinned": b"1"}) and not is_pinned({"pinned": "0"}) and not is_pinned({})
    assert retracted_fields(T0) == {"retracted": "1", "deleted": "1", "retracted_at": T0}
    assert is_retracted({"retracted": b"1"}) and not is_retracted({})


def test_the_curator_and_compaction_read_the_pin() -> None:
    doc = {"memory_id": "m", "kind": "insight", "ts": "1", "pinned": "1"}
    assert curated_entry(doc, None, bookkeeping_from_json(None)).pinned
    assert quarantined_view({**doc, "kind": "episode"}).pinned
    assert not quarantined_view({**doc, "kind": "episode", "pinned": "0"}).pinned
    assert candidate_of({**doc, "kind": "episode"}, [None, None]).pinned


def test_an_aggregate_and_a_summary_as_the_planner_reads_them() -> None:
    aggregate = derived_node(
        {"memory_id": b"a", "kind": b"aggregate", "ts": b"5", "count": b"3", "text": b"t"},
        None,
        None,
    )
    assert (aggregate.kind, aggregate.count, aggregate.summary, aggregate.entry) == (
        "aggregate",
        3,
        None,
        None,
    )
    assert aggregate.content == SummarySource("a", "t", 5, (), ())
    summary = derived_node(
        {
            "memory_id": "s",
            "kind": "summary",
            "ts": str(T0),
            "nexus_keys": "err:oom|url:a@b",
            "tags": "topic/gc",
            "cluster_id": f"url:a@b@{T0 - 5}",
            "summary_level": "2",
            "retracted": "1",
        },
        None,
        None,
    )
    assert summary.summary == SummaryShape("url:a@b", T0 - 5, 2)  # the last '@' splits
    assert summary.retracted
    assert summary.content is not None and summary.content.tags == ("topic/gc",)
    hand_written = derived_node(
        {"memory_id": "s", "kind": "summary", "ts": str(T0), "nexus_keys": "err:oom"}, None, None
    )
    assert hand_written.summary == SummaryShape("err:oom", T0 - T0 % DAY_MS, 1)


def test_a_curated_entry_reads_with_its_bookkeeping() -> None:
    book = orjson.dumps({"status": "active", "source_ids": ["e1", "e2"]})
    node = derived_node(
        {"memory_id": "i", "kind": "insight", "ts": "7", "confidence": "0.8"},
        b"9",
        bookkeeping_from_json(book),
    )
    assert node.entry is not None
    assert (node.entry.status, node.entry.confidence, node.entry.source_ids) == (
        EntryStatus.ACTIVE,
        0.8,
        ("e1", "e2"),
    )
    assert node.entry.last_accessed_ms == 9
    unset = derived_node(  # an HMGET row: None for what the hash lacks
        {"memory_id": "i", "kind": "insight", "decay_class": None, "provenance": None},
        None,
        bookkeeping_from_json(None),
    )
    assert unset.entry is not None
    assert (unset.entry.decay_class, unset.entry.provenance) == ("", "self")
    plain = derived_node({"memory_id": "e", "kind": "episode"}, None, bookkeeping_from_json(None))
    assert plain.entry is None


def test_a_rebuilt_summary_is_written_with_its_vector_in_both_lanes() -> None:
    summary = RebuiltSummary("Summary of 2", T0, ("err:oom",), ("topic/gc",), ("a", "b"), ())
    fields = rebuilt_summary_fields(summary, b"\0" * 16, 4)
    assert fields["canonical"] == fields["eidolon"] == b"\0" * 16
    assert (fields["ts"], fields["nexus_keys"], fields["source_ids"]) == (T0, "err:oom", "a|b")
    assert fields["summary_of"] == "" and fields["gist"]
    with pytest.raises(StorageError):
        rebuilt_summary_fields(summary, b"\0" * 8, 4)


def test_edge_fields_name_the_role_first() -> None:
    assert edge_field(DerivationRole.FOLD, "ev|1") == "fold|ev|1"
    assert parse_edge_field(b"fold|ev|1") == (DerivationRole.FOLD, "ev|1")
    assert parse_edge_field("unknown|x") is None and parse_edge_field("nobar") is None
