"""The facts core, table-driven: assert and supersede, valid at a block, as known
at a transaction time, k-hop neighbours, retraction restoring what it superseded."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grimoire.streams.facts.exceptions import InvalidFact
from grimoire.streams.facts.queries import (
    ReachedEntity,
    as_known_at,
    entity_links,
    neighbours,
    valid_at,
)
from grimoire.streams.facts.timeline import assert_fact, retract
from grimoire.streams.facts.values import Fact, FactChanges, entity_name, fact_id_for
from grimoire.streams.model.nexus_keys import KeySource, extract_keys
from tests.support.facts import agent_fact

AGENT = "golem-1"


def fact(
    event: str,
    obj: str,
    valid_from: int,
    known_ms: int,
    *,
    subject: str = "alice",
    predicate: str = "works_at",
    entity: bool = True,
) -> Fact:
    return agent_fact(
        AGENT,
        event,
        subject,
        obj,
        valid_from=valid_from,
        known_ms=known_ms,
        predicate=predicate,
        entity=entity,
    )


def apply(versions: dict[str, Fact], changes: FactChanges) -> dict[str, Fact]:
    out = dict(versions)
    for fid in changes.removed:
        out.pop(fid, None)
    for f in changes.upserts:
        out[f.fact_id] = f
    return out


def assert_all(*facts: Fact) -> dict[str, Fact]:
    versions: dict[str, Fact] = {}
    for f in facts:
        same = [
            v for v in versions.values() if (v.subject, v.predicate) == (f.subject, f.predicate)
        ]
        versions = apply(versions, assert_fact(same, f))
    return versions


def intervals(versions: dict[str, Fact]) -> dict[str, tuple[int, int | None, int | None]]:
    """source event -> (valid_from, valid_until, superseded_at_ms)."""
    return {
        f.source_event_id: (f.valid_from, f.valid_until, f.superseded_at_ms)
        for f in versions.values()
    }


A = fact("e1", "acme", 10, 1_000)
B = fact("e2", "globex", 20, 2_000)
C = fact("e3", "initech", 15, 3_000)  # a late discovery of an older state
D = fact("e4", "umbrella", 20, 4_000)  # same start as B: a correction
OTHER = fact("e5", "berlin", 5, 500, predicate="lives_in")


@pytest.mark.parametrize(
    ("asserted", "expected"),
    [
        ([A], {"e1": (10, None, None)}),
        ([A, B], {"e1": (10, 20, 2_000), "e2": (20, None, None)}),
        # A backfill cuts the version that held at its start, ends where the next begins.
        ([A, B, C], {"e1": (10, 15, 3_000), "e2": (20, None, None), "e3": (15, 20, None)}),
        # Before every version: stored closed, nothing superseded.
        ([B, A], {"e1": (10, 20, None), "e2": (20, None, None)}),
        # Same start as the active one: it is replaced, kept with an empty interval.
        ([A, B, D], {"e1": (10, 20, 2_000), "e2": (20, 20, 4_000), "e4": (20, None, None)}),
        # Another predicate of the same subject is another timeline.
        ([A, OTHER, B], {"e1": (10, 20, 2_000), "e2": (20, None, None), "e5": (5, None, None)}),
        # A redelivered assert changes nothing.
        ([A, B, A], {"e1": (10, 20, 2_000), "e2": (20, None, None)}),
    ],
)
def test_assert_supersedes_the_version_holding_at_its_start(
    asserted: list[Fact], expected: dict[str, tuple[int, int | None, int | None]]
) -> None:
    versions = assert_all(*asserted)
    assert intervals(versions) == expected
    actives = [f for f in versions.values() if f.active and f.predicate == "works_at"]
    assert len(actives) == 1


@pytest.mark.parametrize(
    ("block", "objects"),
    [(9, []), (10, ["acme"]), (14, ["acme"]), (15, ["initech"]), (19, ["initech"]),
     (20, ["globex"]), (10**9, ["globex"])],
)  # fmt: skip
def test_valid_at_a_block(block: int, objects: list[str]) -> None:
    versions = assert_all(A, B, C)
    assert [f.object for f in valid_at(versions.values(), block)] == objects


@pytest.mark.parametrize(
    ("ts_ms", "block", "expected"),
    [
        (999, None, []),
        # Before B was learned, A was open.
        (1_500, None, [("acme", None)]),
        (2_000, None, [("acme", 20), ("globex", None)]),
        # C was learned at 3 000: until then A ran to 20.
        (2_999, 17, [("acme", 20)]),
        (3_000, 17, [("initech", 20)]),
        (3_000, None, [("acme", 15), ("initech", 20), ("globex", None)]),
        (1_500, 25, [("acme", None)]),
    ],
)
def test_as_known_at_a_transaction_time(
    ts_ms: int, block: int | None, expected: list[tuple[str, int | None]]
) -> None:
    versions = assert_all(A, B, C)
    known = as_known_at(versions.values(), ts_ms, block)
    assert sorted((f.object, f.valid_until) for f in known) == sorted(expected)


GRAPH = [
    fact("g1", "acme", 1, 1, subject="alice"),
    fact("g2", "acme", 1, 1, subject="bob"),
    fact("g3", "berlin", 1, 1, subject="acme", predicate="based_in"),
    fact("g4", "germany", 1, 1, subject="berlin", predicate="in"),
    fact("g5", "42", 1, 1, subject="alice", predicate="age", entity=False),
    fact("g6", "globex", 1, 1, subject="carol", predicate="works_at"),
]


@pytest.mark.parametrize(
    ("entity", "hops", "expected"),
    [
        ("Alice", 0, []),
        ("Alice", 1, [("acme", 1)]),
        ("alice", 2, [("acme", 1), ("berlin", 2), ("bob", 2)]),
        ("ALICE", 3, [("acme", 1), ("berlin", 2), ("bob", 2), ("germany", 3)]),
        ("germany", 2, [("berlin", 1), ("acme", 2)]),
        ("42", 1, []),  # a value object is no entity to walk
        ("carol", 4, [("globex", 1)]),
    ],
)
def test_k_hop_neighbours(entity: str, hops: int, expected: list[tuple[str, int]]) -> None:
    versions = assert_all(*GRAPH)
    found = neighbours(versions.values(), entity, hops=hops)
    assert [(n.entity, n.hops) for n in found] == expected


def test_neighbours_follow_active_facts_or_those_valid_at_a_block() -> None:
    versions = assert_all(A, B)  # alice: acme until 20, then globex
    assert neighbours(versions.values(), "alice") == [
        ReachedEntity("globex", 1, (fact_id_for(AGENT, "e2"),))
    ]
    assert [n.entity for n in neighbours(versions.values(), "alice", at_block=12)] == ["acme"]
    with pytest.raises(InvalidFact):
        neighbours(versions.values(), "alice", hops=99)


@pytest.mark.parametrize(
    ("asserted", "retracted", "expected"),
    [
        # Retracting the superseding version restores the one it closed.
        ([A, B], "e2", {"e1": (10, None, None)}),
        ([A, B, C], "e3", {"e1": (10, 20, 2_000), "e2": (20, None, None)}),
        ([A, B, C], "e2", {"e1": (10, 15, 3_000), "e3": (15, None, None)}),
        ([A, B, C], "e1", {"e2": (20, None, None), "e3": (15, 20, None)}),
        ([A, B, D], "e4", {"e1": (10, 20, 2_000), "e2": (20, None, None)}),
        ([A, B], "nope", {"e1": (10, 20, 2_000), "e2": (20, None, None)}),
    ],
)
def test_retraction_restores_what_the_fact_superseded(
    asserted: list[Fact], retracted: str, expected: dict[str, tuple[int, int | None, int | None]]
) -> None:
    versions = assert_all(*asserted)
    changes = retract(list(versions.values()), fact_id_for(AGENT, retracted))
    after = apply(versions, changes)
    assert intervals(after) == expected
    # The same as never having asserted it (order of asserts kept).
    never = assert_all(*[f for f in asserted if f.source_event_id != retracted])
    assert intervals(never) == expected


def test_a_fact_id_is_deterministic_and_per_agent() -> None:
    assert fact_id_for("a", "e1") == fact_id_for("a", "e1")
    assert fact_id_for("a", "e1") != fact_id_for("b", "e1")
    assert fact_id_for("a", "e1") != fact_id_for("a", "e2")


@pytest.mark.parametrize("raw", ["Alice", " alice ", "@alice", "entity:Alice", "$ALICE"])
def test_entity_names_meet_the_write_paths_entity_keys(raw: str) -> None:
    assert entity_name(raw) == "alice"
    keys = extract_keys(KeySource(entities=("New   York",)))
    assert f"entity:{entity_name('New York')}" in keys


@pytest.mark.parametrize("raw", ["", "  ", "@", "entity:"])
def test_an_empty_entity_is_refused(raw: str) -> None:
    with pytest.raises(InvalidFact):
        entity_name(raw)


def test_entity_links_are_active_entity_facts_both_ways() -> None:
    versions = assert_all(A, B, *GRAPH[4:5])
    b = fact_id_for(AGENT, "e2")
    assert entity_links(versions.values()) == {
        "entity:alice": [("entity:globex", b)],
        "entity:globex": [("entity:alice", b)],
    }


def test_a_version_of_another_group_is_refused() -> None:
    with pytest.raises(InvalidFact):
        assert_fact([A], replace(OTHER, fact_id="x"))
