"""A successor's facts and causal edges: the predecessor's, remapped and discounted.

`Inheritance` (`inherit.py`) hands each line of these families here once every
memory line is in, with the inherited memory ids (old id -> new id). The lines
are the stored shapes (docs/export-format.md): the fact store's four hashes
(`tables/facts/store.py`, values as `tables/codec/fact.py` writes them) and the
causal graph's three (`tables/learn/store.py`, `tables/codec/learning.py`). This
module reads and writes those shapes without importing the tables layer (the pure
core imports nothing above it); `tests/unit/streams/exchange/test_inherit_knowledge.py`
checks its output against the real codecs.

The rule:

- **facts**: every stored version is inherited, closed ones too (the successor
  knows what its predecessor knew, and since when): facts name entities, never
  memories, so none is left behind. A version's new id is `fact_id_for(successor,
  "predecessor:<old fact id>")` (deterministic, computed from the old id alone, so
  an index line is remapped before the versions are read; the old id already names
  the predecessor, being a hash of it and its assert), and that string becomes its
  `source_event_id`: the fact id stays the one its agent and source event give, so
  the successor can `retract` an inherited version by it (49 characters, within
  an event id's limit whatever the agents' names).
  `agent_id` becomes the successor, the closures' `by` are remapped, `confidence`
  (1.0 for an agent's own assert) is multiplied by the discount; valid and
  transaction times and the assert order are kept. The indexes (ids by relation,
  by entity, entity links) are the same ids remapped.
- **causal edges**: an edge is inherited when both its cause and its effect
  memory are (an edge naming a memory left behind is dropped, and so is that
  memory's entry in the adjacency lists, as a hyperedge drops such a member). Its
  `weight` (the mean signal, in [-1, 1]) is multiplied by the discount (rounded to
  9 places, as the edge store rounds), so its causal uplift is discounted alike;
  `evidence` and `last_block` are kept. An inherited memory's `causal_uplift`
  (what recall reads) is the one its inherited out-edges give (`causal_uplifts`):
  its predecessor's times the discount when every out-edge came along. The
  successor's own outcomes then move the inherited weights as they move its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from grimoire.streams.exchange.format import ExchangeError, StateLine, hash_line, hash_of
from grimoire.streams.facts.values import fact_id_for
from grimoire.streams.learn.causal import CausalEdge, causal_uplift

__all__ = [
    "CAUSAL_FAMILIES",
    "FACT_FAMILIES",
    "KNOWLEDGE_FAMILIES",
    "KnowledgeRemap",
    "causal_uplifts",
    "successor_fact_id",
    "successor_fact_source",
]

FACT_FAMILIES: Final = frozenset({"facts", "fact_pairs", "fact_entities", "fact_links"})
CAUSAL_FAMILIES: Final = frozenset({"causal_edges", "causal_effects", "causal_causes"})
KNOWLEDGE_FAMILIES: Final = FACT_FAMILIES | CAUSAL_FAMILIES

# The causal store's separator (`tables/codec/learning.py` SEPARATOR): between an
# edge's cause and effect in its field, and between the ids of an adjacency list.
_UNIT: Final = b"\x1f"
_JSON: Final = orjson.OPT_SORT_KEYS  # as `tables/codec/fact.py` stores
_LINEAGE: Final = "predecessor:"


def successor_fact_source(old_fact_id: str) -> str:
    """The `source_event_id` of an inherited fact version."""
    return f"{_LINEAGE}{old_fact_id}"


def successor_fact_id(successor: str, old_fact_id: str) -> str:
    return fact_id_for(successor, successor_fact_source(old_fact_id))


@dataclass(frozen=True, slots=True)
class KnowledgeRemap:
    """Remaps one line of a fact or causal family (`None`: nothing is left of it)."""

    successor: str
    discount: float
    memory_ids: Mapping[bytes, bytes]  # the inherited memories: old id -> new id

    def line(self, line: StateLine) -> StateLine | None:
        remap = _REMAPS.get(line.type)
        if remap is None:
            raise ValueError(f"{line.type!r} is not a fact or causal family")
        if line.kind != "hash":
            raise ExchangeError(f"{line.type} {line.name!r}: expected a hash")
        try:
            fields = remap(self, hash_of(line))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ExchangeError(f"{line.type} {line.name!r}: unreadable ({exc})") from None
        return hash_line(line, fields) if fields else None

    # ---- facts -------------------------------------------------------------------

    def fact_id(self, old: str) -> str:
        return successor_fact_id(self.successor, old)

    def _versions(self, fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        for old, raw in fields.items():
            data = orjson.loads(raw)
            if not isinstance(data, dict) or data.get("fact_id") != old.decode():
                raise ValueError(f"fact {old.decode()!r} holds another id")
            new = self.fact_id(old.decode())
            data["fact_id"] = new
            data["agent_id"] = self.successor
            data["source_event_id"] = successor_fact_source(old.decode())
            data["closures"] = [[at, until, self.fact_id(by)] for at, until, by in data["closures"]]
            confidence = float(data.pop("confidence", 1.0)) * self.discount
            if confidence != 1.0:  # stored only when not 1.0, as the codec does
                data["confidence"] = confidence
            out[new.encode()] = orjson.dumps(data, option=_JSON)
        return out

    def _id_lists(self, fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
        """ids by relation, ids by entity: JSON lists of fact ids, sorted."""
        return {
            field: orjson.dumps(sorted({self.fact_id(str(i)) for i in _list(raw)}))
            for field, raw in fields.items()
        }

    def _links(self, fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
        """entity key -> [[linked entity key, fact id], ...], sorted."""
        out: dict[bytes, bytes] = {}
        for field, raw in fields.items():
            pairs = {(str(key), self.fact_id(str(fact))) for key, fact in _list(raw)}
            out[field] = orjson.dumps([list(pair) for pair in sorted(pairs)])
        return out

    # ---- causal edges ------------------------------------------------------------

    def _edges(self, fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        for field, raw in fields.items():
            edge = _edge(field, raw)
            cause = self.memory_ids.get(edge.cause.encode())
            effect = self.memory_ids.get(edge.effect.encode())
            if cause is None or effect is None:
                continue
            weight = round(edge.weight * self.discount, 9)
            out[cause + _UNIT + effect] = f"{weight!r}|{edge.evidence}|{edge.last_block}".encode()
        return out

    def _adjacency(self, fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
        """cause -> its effects, effect -> its causes: inherited ends only."""
        out: dict[bytes, bytes] = {}
        for node, raw in fields.items():
            if node not in self.memory_ids:
                continue
            ends = sorted({self.memory_ids[i] for i in raw.split(_UNIT) if i in self.memory_ids})
            if ends:
                out[self.memory_ids[node]] = _UNIT.join(ends)
        return out


def causal_uplifts(edge_lines: Iterable[StateLine]) -> dict[bytes, float]:
    """Each cause's causal uplift from its edges in `edge_lines` (remapped
    `causal_edges` lines): what recall reads from an inherited memory's
    `causal_uplift`, the store's `causal_uplift` of its out-edges, in edge order."""
    by_cause: dict[str, list[CausalEdge]] = {}
    for line in edge_lines:
        for field, raw in hash_of(line).items():
            edge = _edge(field, raw)
            by_cause.setdefault(edge.cause, []).append(edge)
    return {
        cause.encode(): causal_uplift(sorted(edges, key=lambda edge: edge.effect))
        for cause, edges in sorted(by_cause.items())
    }


def _edge(field: bytes, raw: bytes) -> CausalEdge:
    """A stored edge (`tables/codec/learning.py`: cause<US>effect -> weight|evidence|block)."""
    cause, effect = field.decode().split(_UNIT.decode(), 1)
    weight, evidence, last_block = raw.decode().split("|")
    return CausalEdge(cause, effect, float(weight), int(evidence), int(last_block))


def _list(raw: bytes) -> list[Any]:
    data = orjson.loads(raw)
    if not isinstance(data, list):
        raise ValueError("expected a JSON list")
    return data


_REMAPS: Final[Mapping[str, Callable[[KnowledgeRemap, dict[bytes, bytes]], dict[bytes, bytes]]]] = {
    "facts": KnowledgeRemap._versions,
    "fact_pairs": KnowledgeRemap._id_lists,
    "fact_entities": KnowledgeRemap._id_lists,
    "fact_links": KnowledgeRemap._links,
    "causal_edges": KnowledgeRemap._edges,
    "causal_effects": KnowledgeRemap._adjacency,
    "causal_causes": KnowledgeRemap._adjacency,
}
