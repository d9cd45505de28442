"""A successor inherits its predecessor's facts and causal edges: ids remapped as its
memories' are, confidence and weights at the successor discount, edges naming a
memory left behind dropped. The lines are built and read back with the stores' own
codecs, so the pure remapping cannot drift from what the stores write."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grimoire.streams.exchange.format import ExchangeError, StateLine, hash_of
from grimoire.streams.exchange.inherit import (
    DEFAULT_INHERITANCE_DISCOUNT,
    Inheritance,
    InheritanceOptions,
    successor_memory_id,
)
from grimoire.streams.exchange.inherit_knowledge import (
    KnowledgeRemap,
    successor_fact_id,
    successor_fact_source,
)
from grimoire.streams.facts.queries import entity_links
from grimoire.streams.facts.timeline import assert_fact, retract
from grimoire.streams.facts.values import Closure, Fact, fact_id_for
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.learn.causal import CausalEdge, causal_uplift, reinforce
from grimoire.tables.codec.fact import (
    decode_fact,
    decode_ids,
    decode_links,
    encode_fact,
    encode_ids,
    encode_links,
    pair_field,
)
from grimoire.tables.codec.learning import edge_field, edge_from_stored, edge_value, ids_value
from tests.support.facts import agent_fact

TS = 1_790_000_000_000
PRED, SUCC = "pred", "succ"


def _memory(memory_id: str, *, live: bool = True, **extra: bytes) -> StateLine:
    fields = {
        b"memory_id": memory_id.encode(),
        b"agent_id": PRED.encode(),
        b"ts": str(TS).encode(),
        b"confidence": b"0.8",
        b"deleted": b"0" if live else b"1",
        b"text": b"the pool was thin",
        **{k.encode(): v for k, v in extra.items()},
    }
    return StateLine("memory", memory_id, "hash", tuple(sorted(fields.items())))


def _facts() -> list[Fact]:
    """alice works at acme, then at globex (acme's version closed); acme is in berlin."""
    acme = agent_fact(PRED, "f-1", "alice", "acme", valid_from=10, known_ms=TS, order=1)
    globex = agent_fact(PRED, "f-2", "alice", "globex", valid_from=20, known_ms=TS + 1)
    berlin = agent_fact(
        PRED, "f-3", "acme", "berlin", valid_from=5, known_ms=TS + 2, predicate="located_in"
    )
    versions = [acme]
    changes = assert_fact(versions, globex)
    return [*changes.upserts, berlin]


def _fact_lines(facts: list[Fact]) -> list[StateLine]:
    """The fact store's four hashes, as `RedisFactStore.apply` leaves them."""
    by_pair: dict[str, set[str]] = {}
    by_entity: dict[str, set[str]] = {}
    for fact in facts:
        by_pair.setdefault(pair_field(fact.subject, fact.predicate), set()).add(fact.fact_id)
        for name in fact.entities:
            by_entity.setdefault(name, set()).add(fact.fact_id)

    def line(family: str, fields: dict[str, bytes]) -> StateLine:
        pairs = tuple(sorted((k.encode(), v) for k, v in fields.items()))
        return StateLine(family, "", "hash", pairs)

    return [
        line("fact_entities", {n: encode_ids(sorted(ids)) for n, ids in by_entity.items()}),
        line("fact_links", {k: encode_links(v) for k, v in entity_links(facts).items()}),
        line("fact_pairs", {p: encode_ids(sorted(ids)) for p, ids in by_pair.items()}),
        line("facts", {f.fact_id: encode_fact(f) for f in facts}),
    ]


EDGES = (
    CausalEdge("m1", "m2", 0.8, 3, 40),  # both inherited
    CausalEdge("m2", "m1", -0.6, 1, 41),  # both inherited
    CausalEdge("m1", "m3", 1.0, 2, 42),  # m3 is deleted: not inherited
    CausalEdge("m3", "m2", 0.5, 1, 43),
)


def _causal_lines(edges: tuple[CausalEdge, ...]) -> list[StateLine]:
    """The causal store's three hashes, as `RedisLearningStore.outcome_part` writes."""
    effects: dict[str, set[str]] = {}
    causes: dict[str, set[str]] = {}
    for edge in edges:
        effects.setdefault(edge.cause, set()).add(edge.effect)
        causes.setdefault(edge.effect, set()).add(edge.cause)

    def line(family: str, fields: dict[str, str]) -> StateLine:
        pairs = tuple(sorted((k.encode(), v.encode()) for k, v in fields.items()))
        return StateLine(family, "", "hash", pairs)

    return [
        line("causal_causes", {e: ids_value(c) for e, c in causes.items()}),
        line("causal_edges", {edge_field(e.cause, e.effect): edge_value(e) for e in edges}),
        line("causal_effects", {c: ids_value(e) for c, e in effects.items()}),
    ]


def _export() -> list[StateLine]:
    memories = [_memory("m1"), _memory("m2"), _memory("m3", live=False)]
    return [*memories, *_causal_lines(EDGES), *_fact_lines(_facts())]


def _inherit(discount: float = DEFAULT_INHERITANCE_DISCOUNT) -> dict[str, StateLine]:
    out = Inheritance(PRED, SUCC, InheritanceOptions(discount)).lines(_export())
    return {line.type: line for line in out if line.type != "memory"}


def _new(memory: str) -> str:
    return successor_memory_id(SUCC, PRED, memory, TS)


def test_causal_edges_between_inherited_memories_are_remapped_and_discounted() -> None:
    lines = _inherit(0.5)
    edges = sorted(
        (edge_from_stored(f, v) for f, v in hash_of(lines["causal_edges"]).items()),
        key=lambda e: (e.cause, e.effect),
    )
    expected = sorted(
        [
            CausalEdge(_new("m1"), _new("m2"), 0.4, 3, 40),
            CausalEdge(_new("m2"), _new("m1"), -0.3, 1, 41),
        ],
        key=lambda e: (e.cause, e.effect),
    )
    assert edges == expected  # the edges naming the deleted m3 are dropped
    # The adjacency lists name the same edges, and only them, as the store writes them.
    effects = {k.decode(): v.decode() for k, v in hash_of(lines["causal_effects"]).items()}
    causes = {k.decode(): v.decode() for k, v in hash_of(lines["causal_causes"]).items()}
    assert effects == {_new("m1"): ids_value([_new("m2")]), _new("m2"): ids_value([_new("m1")])}
    assert causes == {_new("m2"): ids_value([_new("m1")]), _new("m1"): ids_value([_new("m2")])}
    # Their uplift is the predecessor's, discounted.
    original = [e for e in EDGES if e.cause == "m1" and e.effect == "m2"]
    inherited = [e for e in edges if e.cause == _new("m1")]
    assert causal_uplift(inherited) == pytest.approx(0.5 * causal_uplift(original))
    # The successor's own outcome moves an inherited edge as it moves its own.
    again = reinforce(inherited[0], _new("m1"), _new("m2"), 1.0, 50)
    assert (again.evidence, again.last_block) == (4, 50)


def test_an_inherited_memorys_causal_uplift_is_the_one_its_inherited_edges_give() -> None:
    """What recall reads: m1's uplift from m1 -> m2 alone (m1 -> m3 was left behind),
    m2's from m2 -> m1; a memory whose out-edges all stayed behind stores none."""
    memories = [
        _memory("m1", causal_uplift=b"0.7"),
        _memory("m2", causal_uplift=b"-0.3"),
        _memory("m4", causal_uplift=b"0.5"),
        _memory("m3", live=False),
    ]
    edges = (*EDGES, CausalEdge("m4", "m3", 1.0, 1, 44))
    out = list(Inheritance(PRED, SUCC).lines([*memories, *_causal_lines(edges)]))
    stored = {line.name: hash_of(line).get(b"causal_uplift") for line in out[:3]}
    assert stored == {
        _new("m1"): repr(causal_uplift([CausalEdge("a", "b", 0.4, 3, 40)])).encode(),
        _new("m2"): repr(causal_uplift([CausalEdge("a", "b", -0.3, 1, 41)])).encode(),
        _new("m4"): None,
    }
    assert [line.type for line in out[:3]] == ["memory"] * 3  # memories still come first


def test_an_edge_with_one_end_left_behind_leaves_no_adjacency_entry() -> None:
    only_m3 = (CausalEdge("m1", "m3", 1.0, 2, 42), CausalEdge("m3", "m2", 0.5, 1, 43))
    memories = [_memory("m1"), _memory("m2"), _memory("m3", live=False)]
    out = list(Inheritance(PRED, SUCC).lines([*memories, *_causal_lines(only_m3)]))
    assert not {line.type for line in out} & {"causal_edges", "causal_effects", "causal_causes"}


def test_every_fact_version_is_inherited_under_its_new_id_at_the_discount() -> None:
    lines = _inherit(0.25)
    facts = {f.fact_id: f for f in map(decode_fact, hash_of(lines["facts"]).values())}
    originals = {f.fact_id: f for f in _facts()}
    assert set(facts) == {successor_fact_id(SUCC, old) for old in originals}
    for old, original in originals.items():
        new = successor_fact_id(SUCC, old)
        source = successor_fact_source(old)
        expected = replace(
            original,
            fact_id=new,
            agent_id=SUCC,
            source_event_id=source,
            confidence=0.25,
            closures=tuple(
                Closure(c.at_ms, c.valid_until, successor_fact_id(SUCC, c.by))
                for c in original.closures
            ),
        )
        assert facts[new] == expected
        # Stored as the fact store stores it, and retractable by its source event.
        assert hash_of(lines["facts"])[new.encode()] == encode_fact(expected)
        assert new == fact_id_for(SUCC, source)
        assert len(source) <= InputLimits().max_id_chars  # a `retract` can name it
    # The closed version stays closed, by the new id of the version that closed it.
    acme = facts[successor_fact_id(SUCC, fact_id_for(PRED, "f-1"))]
    assert acme.valid_until == 20 and acme.superseded_by == successor_fact_id(
        SUCC, fact_id_for(PRED, "f-2")
    )


def test_the_fact_indexes_are_the_ones_the_inherited_versions_give() -> None:
    lines = _inherit()
    facts = [decode_fact(raw) for raw in hash_of(lines["facts"]).values()]
    rebuilt = {line.type: hash_of(line) for line in _fact_lines(facts)}
    for family in ("fact_pairs", "fact_entities", "fact_links"):
        assert hash_of(lines[family]) == rebuilt[family], family
    links = {k.decode(): decode_links(v) for k, v in hash_of(lines["fact_links"]).items()}
    assert links == entity_links(facts)
    pairs = hash_of(lines["fact_pairs"])
    assert len(decode_ids(pairs[pair_field("alice", "works_at").encode()])) == 2


def test_an_inherited_fact_joins_the_successors_timeline() -> None:
    """The successor's own assert closes the inherited version; retracting its
    own restores it; the inherited version's confidence survives both."""
    lines = _inherit()
    held = [decode_fact(raw) for raw in hash_of(lines["facts"]).values()]
    works = [f for f in held if f.predicate == "works_at"]
    mine = agent_fact(SUCC, "own-1", "alice", "initech", valid_from=30, known_ms=TS + 9)
    changes = assert_fact(works, mine)
    closed = [f for f in changes.upserts if f.fact_id != mine.fact_id]
    assert [(f.object, f.valid_until, f.confidence) for f in closed] == [("globex", 30, 0.5)]
    after = {f.fact_id: f for f in works} | {f.fact_id: f for f in changes.upserts}
    undone = retract(list(after.values()), mine.fact_id)
    restored = [f for f in undone.upserts if f.object == "globex"]
    assert [(f.valid_until, f.confidence) for f in restored] == [(None, 0.5)]


def test_inheriting_twice_gives_the_same_bytes_and_a_discount_of_one_keeps_them() -> None:
    assert _inherit(0.3) == _inherit(0.3)
    whole = _inherit(1.0)
    for raw in hash_of(whole["facts"]).values():
        assert b"confidence" not in raw  # 1.0 is stored as the codec stores it: not at all
    stored = hash_of(whole["causal_edges"]).items()
    weights = sorted(edge_from_stored(f, v).weight for f, v in stored)
    assert weights == [-0.6, 0.8]


def test_an_inherited_confidence_is_discounted_again() -> None:
    """A successor's successor: the fact's confidence is discounted twice."""
    first = KnowledgeRemap(SUCC, 0.5, {})
    line = _fact_lines(_facts())[-1]
    once = first.line(line)
    assert once is not None
    second = KnowledgeRemap("heir", 0.5, {}).line(once)
    assert second is not None
    assert {decode_fact(raw).confidence for raw in hash_of(second).values()} == {0.25}
    assert {decode_fact(raw).agent_id for raw in hash_of(second).values()} == {"heir"}


def test_an_unreadable_fact_or_edge_is_an_exchange_error() -> None:
    remap = KnowledgeRemap(SUCC, 0.5, {b"m1": b"n1", b"m2": b"n2"})
    bad_fact = StateLine("facts", "", "hash", ((b"fact-x", b"{not json"),))
    bad_edge = StateLine("causal_edges", "", "hash", ((b"m1\x1fm2", b"0.5|x|1"),))
    other_id = StateLine("facts", "", "hash", ((b"fact-x", encode_fact(_facts()[0])),))
    for line in (bad_fact, bad_edge, other_id):
        with pytest.raises(ExchangeError, match=line.type):
            remap.line(line)
    with pytest.raises(ExchangeError, match="expected a hash"):
        remap.line(StateLine("facts", "", "string", b"{}"))
