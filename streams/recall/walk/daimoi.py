"""Daimoi (docs/design.md §5 step 2): deterministic, budgeted walks over nexus keys.

Seeds from the vector/BM25 lanes are expanded into their structural neighbourhood:
a walker ranks a memory's keys, fetches the newest memories sharing the top keys,
scores them and continues from its best unexpanded node. The walk is pure; the
graph comes in through `GraphView`, whose methods take *batches* so one expansion
costs a constant number of round trips however many neighbours it touches.

Semantics (all deterministic, no clock, no randomness):

* Seeds are deduplicated by id (best score kept) and sorted by (-score, id); seeds
  whose node is missing or deleted are dropped. Walker ``i`` starts at
  ``usable_seeds[i % len(usable_seeds)]`` with the seed's score as its strength and
  uses ``circuits[i % len(circuits)]`` as its key-weight profile (none when empty).
* Hops count from the seed (hop 0). Only nodes at hop ``< max_hops`` are expanded,
  so returned memories are at most ``max_hops`` away. Each walker makes at most
  ``max_hops`` *real* expansions (its step budget, as in the seed design). A node
  already expanded over the same keys (same scores) by an earlier walker is
  re-derived from the in-walk caches without any graph call and without spending a
  step, so walkers that share a seed and circuit fan out instead of repeating
  each other.
* Walkers take turns one step each (round robin) until all are done.
* One expansion: rank the node's keys (one ``degrees`` call for keys whose degree
  is not cached yet), drop the keys this walker already walked (their neighbours
  are known), keep ``max_keys_per_node``, one ``newest`` call for the keys
  not fetched yet, one ``nodes`` call for unseen neighbours, and at most
  `MAX_REPLACEMENT_DEPTH` ``nodes`` calls to resolve compaction replacements.
  Each round reads ahead what its walkers' next expansions need: for a node with
  at most `READ_AHEAD_KEYS_FACTOR` x ``max_keys_per_node`` keys, all its keys'
  degrees and members come in one ``neighbourhood`` call, though only the best
  ``max_keys_per_node`` are walked.
* A neighbour with ``replaced_by`` is replaced by its summary (followed up to
  `MAX_REPLACEMENT_DEPTH` links); if the summary is missing or deleted the original
  stands. Deleted memories and the seeds themselves are never returned.
* Neighbour score = parent strength * key strength * recency * utility * kind
  preference * (1 - spam), where the key strength is the ranked key score squashed
  into (0, 1) by ``s / (1 + s)`` so scores shrink with distance.
* The global candidate set is capped at ``max_total_candidates``: within one
  expansion the best-scored new candidates are admitted first; a node that is not
  admitted is not walked either. A memory reached several times keeps its best
  score (ties: fewer hops, then lower walker) and the sorted union of its keys.
* Output is sorted by (-score, memory_id).
* Facts (a graph that also offers `KeyLinks`): a node holding `entity:X` also
  holds, as extra keys, the `entity:Y` that active facts link X to (at most
  `MAX_LINKED_KEYS_PER_NODE` per node, taken in (own key, linked key) order), so
  a walk crosses from a memory about alice to memories about acme when alice
  works at acme. A neighbour reached over such a key names the fact in
  `via_facts`. One `linked_keys` call per batch of nodes read, for entity keys
  not looked up yet.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from grimoire.streams.model.decay import recency
from grimoire.streams.model.nexus_keys import (
    DEFAULT_WEIGHTS,
    KeyWeights,
    commonness_penalty,
    key_type,
    type_weight,
)
from grimoire.streams.model.records import Kind
from grimoire.streams.ports.recall import GraphView, KeyLinks

DEFAULT_FIELD_BONUS = 1.4
DEFAULT_HALF_LIFE_MS = 7 * 24 * 3600 * 1000
MAX_REPLACEMENT_DEPTH = 3
# A node with up to this many times the keys a walker takes from it has all its
# keys read ahead in one round trip (degrees and members together): reading a
# few lists it will not walk costs less than ranking first and reading after
# (two more round trips a round; ~1.7 ms of a 100,000-memory recall's walk).
READ_AHEAD_KEYS_FACTOR = 2
# Extra keys facts may give one node: bounds what a hub entity adds to a walk.
MAX_LINKED_KEYS_PER_NODE = 4
ENTITY_KEY_PREFIX = "entity:"

# Kind preference (summary > aggregate > human > bot). Kinds other than summary and
# aggregate are judged by their actor; an unknown actor counts as human.
SUMMARY_PREFERENCE = 1.3
AGGREGATE_PREFERENCE = 1.15
HUMAN_PREFERENCE = 1.0
BOT_PREFERENCE = 0.85


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the walk needs to know about one memory."""

    memory_id: str
    kind: str
    keys: tuple[str, ...]
    ts_ms: int
    utility: float = 0.5
    deleted: bool = False
    replaced_by: str = ""
    spam: float = 0.0
    actor: str = ""
    # utility * kind preference * (1 - spam): fixed per node, so worked out once
    # when it is built, not on every walk that meets it (nodes are cached).
    prior: float = field(init=False, repr=False, compare=False)
    # The node's `entity:` keys, the only ones facts link: a walk looks them up
    # on every node it reads, and nodes outlive walks in the store's cache.
    entity_keys: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        prior = (
            _clamp01(self.utility)
            * kind_preference(self.kind, self.actor)
            * (1.0 - _clamp01(self.spam))
        )
        object.__setattr__(self, "prior", prior)
        entities = frozenset(k for k in self.keys if k.startswith(ENTITY_KEY_PREFIX))
        object.__setattr__(self, "entity_keys", entities)


@dataclass(frozen=True, slots=True)
class WalkBudget:
    """Count budgets of one walk (docs/design.md §5 step 2 defaults)."""

    num_walkers: int = 8
    max_hops: int = 2
    max_keys_per_node: int = 6
    max_neighbors_per_key: int = 25
    max_total_candidates: int = 400

    def __post_init__(self) -> None:
        for name in (
            "num_walkers",
            "max_hops",
            "max_keys_per_node",
            "max_neighbors_per_key",
            "max_total_candidates",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class Circuit:
    """A walker's key-weight profile: multipliers per key type (`keys.KeyType`)."""

    name: str
    type_multipliers: tuple[tuple[str, float], ...] = ()

    def multiplier(self, key: str) -> float:
        ktype = key_type(key)
        for name, factor in self.type_multipliers:
            if name == ktype:
                return factor
        return 1.0


@dataclass(frozen=True, slots=True)
class Seed:
    memory_id: str
    score: float


class Related(NamedTuple):
    """A memory the walk reached. A named tuple: a walk returns hundreds."""

    memory_id: str
    score: float
    via_keys: tuple[str, ...]
    hops: int
    walker: int
    via_facts: tuple[str, ...] = ()  # facts whose entity links it was reached over


# --------------------------------------------------------------------------- pure pieces


def rank_keys(
    node: NodeInfo,
    degrees: Mapping[str, int],
    field_digest: Sequence[str] | frozenset[str] = (),
    circuit: Circuit | None = None,
    weights: KeyWeights = DEFAULT_WEIGHTS,
    field_bonus: float = DEFAULT_FIELD_BONUS,
    limit: int | None = None,
) -> list[tuple[str, float]]:
    """The node's keys with their scores, best first (ties by key), at most `limit`.

    score = type weight * field bonus (key in digest) * commonness penalty(degree)
    * circuit multiplier. A key missing from `degrees` has degree 0; a malformed
    key (not `<type>:<value>`) is skipped rather than failing the recall.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    digest = field_digest if isinstance(field_digest, frozenset) else frozenset(field_digest)
    scored: list[tuple[str, float]] = []
    for key in sorted(set(node.keys)):
        try:
            score = type_weight(key, weights)
        except ValueError:
            continue
        if key in digest:
            score *= field_bonus
        score *= commonness_penalty(max(0, degrees.get(key, 0)))
        if circuit is not None:
            score *= circuit.multiplier(key)
        scored.append((key, score))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored if limit is None else scored[:limit]


def key_strength(key_score: float) -> float:
    """A ranked key score squashed into [0, 1): s / (1 + s)."""
    if key_score <= 0.0:
        return 0.0
    return key_score / (1.0 + key_score)


def kind_preference(kind: str, actor: str = "") -> float:
    """summary 1.3 > aggregate 1.15 > human 1.0 > bot 0.85 (other kinds by actor)."""
    if kind == Kind.SUMMARY:
        return SUMMARY_PREFERENCE
    if kind == Kind.AGGREGATE:
        return AGGREGATE_PREFERENCE
    return BOT_PREFERENCE if actor == "bot" else HUMAN_PREFERENCE


def _clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


def node_factor(node: NodeInfo, *, now_ms: int, half_life_ms: int = DEFAULT_HALF_LIFE_MS) -> float:
    """What a neighbour's score owes to the node itself: recency * utility * kind
    preference * (1 - spam), utility and spam clamped to [0, 1]. A node met over
    many keys and walkers is worked out once per walk."""
    return recency(now_ms - node.ts_ms, half_life_ms) * node.prior


def score_neighbour(
    node: NodeInfo,
    *,
    seed_strength: float,
    key_strength: float,
    now_ms: int,
    half_life_ms: int = DEFAULT_HALF_LIFE_MS,
) -> float:
    """seed strength * key strength * `node_factor`."""
    return (
        seed_strength * key_strength * node_factor(node, now_ms=now_ms, half_life_ms=half_life_ms)
    )


# --------------------------------------------------------------------------- the walk


@dataclass(slots=True)
class _Hit:
    score: float
    hops: int
    walker: int
    keys: set[str] = field(default_factory=set)
    facts: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Walker:
    index: int
    circuit: Circuit | None
    frontier: dict[str, tuple[float, int]]  # memory id -> (strength, hops)
    expanded: set[str] = field(default_factory=set)
    walked_keys: set[str] = field(default_factory=set)
    steps: int = 0
    done: bool = False


@dataclass(slots=True)
class _Caches:
    """What one walk has read or worked out. The graph does not change during a
    walk, so every entry stays valid to its end; walkers meet the same nodes and
    keys again and again, and each is read and scored once."""

    nodes: dict[str, NodeInfo | None] = field(default_factory=dict)
    degrees: dict[str, int] = field(default_factory=dict)
    newest: dict[str, list[str]] = field(default_factory=dict)
    factors: dict[str, float] = field(default_factory=dict)
    # id -> the live node standing for it after compaction links (None: none)
    resolved: dict[str, NodeInfo | None] = field(default_factory=dict)
    # (id, circuit) -> the node's ranked keys, once all their degrees are known
    ranked: dict[tuple[str, int], list[tuple[str, float]]] = field(default_factory=dict)
    # key -> its members as (live id standing for each, node factor): every
    # expansion over the key scores the same members, only scaled differently
    members: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    # Facts: the graph's entity links (None: it has none), each entity key's
    # links as read, and per node the keys facts added to it -> the fact id.
    linker: KeyLinks | None = None
    links: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    # The entity keys read so far that do link somewhere: a node holding none of
    # them gains nothing, and most nodes of most agents hold none.
    linking: set[str] = field(default_factory=set)
    node_links: dict[str, dict[str, str]] = field(default_factory=dict)


async def _load_nodes(graph: GraphView, caches: _Caches, ids: Iterable[str]) -> None:
    missing = sorted({i for i in ids if i not in caches.nodes})
    if not missing:
        return
    found = await graph.nodes(missing)
    if caches.linker is not None and found:
        found = await _with_links(caches.linker, caches, found)
    for memory_id in missing:
        caches.nodes[memory_id] = found.get(memory_id)


async def _with_links(
    linker: KeyLinks, caches: _Caches, found: Mapping[str, NodeInfo]
) -> dict[str, NodeInfo]:
    """`found` with each node's fact-linked entity keys added (see the module
    docstring); one `linked_keys` call for entity keys not looked up yet."""
    links, linking = caches.links, caches.linking
    unknown = sorted(
        {key for node in found.values() for key in node.entity_keys if key not in links}
    )
    if unknown:
        got = await linker.linked_keys(unknown)
        for key in unknown:
            links[key] = list(got.get(key, ()))
            if links[key]:
                linking.add(key)
        if not linker.may_link:
            caches.linker = None  # it holds none: the rest of the walk stops asking
    if not linking:
        return dict(found)
    out: dict[str, NodeInfo] = {}
    for memory_id, node in found.items():
        if linking.isdisjoint(node.entity_keys):
            out[memory_id] = node
            continue
        own = set(node.keys)
        extra: dict[str, str] = {}
        for key in sorted(node.entity_keys):
            for linked, fact_id in links.get(key, ()):
                if len(extra) >= MAX_LINKED_KEYS_PER_NODE:
                    break
                if linked not in own and linked not in extra:
                    extra[linked] = fact_id
        if extra:
            caches.node_links[memory_id] = extra
            node = replace(node, keys=(*node.keys, *extra))
        out[memory_id] = node
    return out


async def _load_degrees(graph: GraphView, caches: _Caches, keys: Iterable[str]) -> None:
    unknown = sorted({k for k in keys if k not in caches.degrees})
    if not unknown:
        return
    found = await graph.degrees(unknown)
    for key in unknown:
        caches.degrees[key] = found.get(key, 0)


def _live(caches: _Caches, memory_id: str) -> NodeInfo | None:
    node = caches.nodes.get(memory_id)
    return None if node is None or node.deleted else node


async def _resolve(graph: GraphView, caches: _Caches, ids: Iterable[str]) -> None:
    """Fill `caches.resolved` for `ids` (loaded already): the live node after
    following compaction links, batched per link depth."""
    pending: dict[str, NodeInfo] = {}  # original id -> current (compacted) node
    for memory_id in ids:
        if memory_id in caches.resolved:
            continue
        node = _live(caches, memory_id)
        caches.resolved[memory_id] = node
        if node is not None and node.replaced_by:
            pending[memory_id] = node
    for _ in range(MAX_REPLACEMENT_DEPTH):
        if not pending:
            break
        await _load_nodes(graph, caches, [n.replaced_by for n in pending.values()])
        still: dict[str, NodeInfo] = {}
        for memory_id, node in pending.items():
            target = _live(caches, node.replaced_by)
            if target is None or target.memory_id == node.memory_id:
                continue  # summary gone: the original stands
            caches.resolved[memory_id] = target
            if target.replaced_by:
                still[memory_id] = target
        pending = still


@dataclass(frozen=True, slots=True)
class _KeyRanking:
    """How keys are ranked in one walk (the arguments of `rank_keys`)."""

    digest: frozenset[str]
    weights: KeyWeights
    field_bonus: float
    circuits: Sequence[Circuit]


async def _ranked_keys(
    graph: GraphView, caches: _Caches, node: NodeInfo, walker: _Walker, ranking: _KeyRanking
) -> list[tuple[str, float]]:
    """`rank_keys` of the node under the walker's circuit (one `degrees` call for
    keys not seen yet), remembered for the rest of the walk."""
    memo = (node.memory_id, walker.index % len(ranking.circuits) if ranking.circuits else 0)
    ranked = caches.ranked.get(memo)
    if ranked is None:
        await _load_degrees(graph, caches, node.keys)
        ranked = rank_keys(
            node,
            caches.degrees,
            ranking.digest,
            walker.circuit,
            ranking.weights,
            ranking.field_bonus,
        )
        caches.ranked[memo] = ranked
    return ranked


def _unwalked(
    ranked: Sequence[tuple[str, float]], walker: _Walker, budget: WalkBudget
) -> list[tuple[str, float]]:
    """The node's best `max_keys_per_node` keys that this walker has not walked yet."""
    walked = walker.walked_keys
    return [(key, score) for key, score in ranked if key not in walked][: budget.max_keys_per_node]


async def _fetch_keys(
    graph: GraphView, caches: _Caches, keys: Iterable[str], budget: WalkBudget
) -> None:
    """Newest members of keys not fetched yet, their nodes and their replacements."""
    unfetched = sorted({k for k in keys if k not in caches.newest})
    if not unfetched:
        return
    lists = await graph.newest(unfetched, budget.max_neighbors_per_key)
    await _keep_members(graph, caches, unfetched, lists, budget)


async def _keep_members(
    graph: GraphView,
    caches: _Caches,
    keys: Sequence[str],
    lists: Mapping[str, Sequence[str]],
    budget: WalkBudget,
) -> None:
    """Cache the keys' fetched members, then load their nodes and replacements."""
    ids: set[str] = set()
    for key in keys:
        members = list(lists.get(key, ()))[: budget.max_neighbors_per_key]
        caches.newest[key] = members
        ids.update(members)
    await _load_nodes(graph, caches, ids)
    await _resolve(graph, caches, ids)


def _key_members(
    caches: _Caches, key: str, *, now_ms: int, half_life_ms: int
) -> list[tuple[str, float]]:
    """The key's newest members (fetched already) as the live nodes standing for
    them, each with its `node_factor`, worked out once per walk."""
    found = caches.members.get(key)
    if found is None:
        found = []
        factors, resolved = caches.factors, caches.resolved
        for raw_id in caches.newest[key]:
            target = resolved.get(raw_id)
            if target is None:
                continue
            factor = factors.get(target.memory_id)
            if factor is None:
                factor = node_factor(target, now_ms=now_ms, half_life_ms=half_life_ms)
                factors[target.memory_id] = factor
            found.append((target.memory_id, factor))
        caches.members[key] = found
    return found


def _neighbours(
    caches: _Caches,
    node: NodeInfo,
    strength: float,
    ranked: Sequence[tuple[str, float]],
    *,
    now_ms: int,
    half_life_ms: int,
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Scored neighbours of `node` over `ranked` keys (fetched already): id -> best
    score, and id -> every key it was reached over."""
    scores: dict[str, float] = {}
    via: dict[str, list[str]] = {}
    node_id = node.memory_id
    # `ranked` is best first, and a neighbour's score is its (fixed) node factor
    # times the key's strength: the first key that reaches it gives its best
    # score, later ones only add themselves to its reasons.
    for key, key_score in ranked:
        strength_k = strength * key_strength(key_score)
        for target_id, factor in _key_members(
            caches, key, now_ms=now_ms, half_life_ms=half_life_ms
        ):
            keys = via.get(target_id)
            if keys is not None:
                keys.append(key)
            elif target_id != node_id:
                scores[target_id] = strength_k * factor
                via[target_id] = [key]
    return scores, via


def _next_choice(walker: _Walker, max_hops: int) -> str | None:
    """The walker's strongest unexpanded node within reach (ties: lowest id)."""
    best_id: str | None = None
    best = 0.0
    expanded = walker.expanded
    for memory_id, (strength, hops) in walker.frontier.items():
        if hops >= max_hops or memory_id in expanded:
            continue
        if best_id is None or strength > best or (strength == best and memory_id < best_id):
            best_id, best = memory_id, strength
    return best_id


async def _prefetch_round(
    graph: GraphView,
    caches: _Caches,
    walkers: Sequence[_Walker],
    *,
    budget: WalkBudget,
    ranking: _KeyRanking,
) -> None:
    """Warm the caches with what every walker's next expansion will read, in one
    batched call per kind, so a round costs a few round trips however many
    walkers step in it. The graph does not change during a walk, so this only
    moves reads earlier; it never changes what a walker decides."""
    nodes = []
    for walker in walkers:
        memory_id = None if walker.done else _next_choice(walker, budget.max_hops)
        node = _live(caches, memory_id) if memory_id is not None else None
        if node is not None:
            nodes.append((walker, node))
    if budget.max_neighbors_per_key > 0:
        # A node with few keys has them all read in one round trip, degrees
        # and members, whichever the walker then takes; larger nodes rank their
        # keys on the degrees first and fetch only the best.
        few = READ_AHEAD_KEYS_FACTOR * budget.max_keys_per_node
        whole = sorted(
            {
                key
                for _, node in nodes
                if len(set(node.keys)) <= few
                for key in node.keys
                if key not in caches.newest
            }
        )
        if whole:
            degrees, lists = await graph.neighbourhood(whole, budget.max_neighbors_per_key)
            for key in whole:
                caches.degrees.setdefault(key, degrees.get(key, 0))
            await _keep_members(graph, caches, whole, lists, budget)
    await _load_degrees(graph, caches, (k for _, node in nodes for k in node.keys))
    keys: set[str] = set()
    for walker, node in nodes:
        ranked = await _ranked_keys(graph, caches, node, walker, ranking)
        keys.update(key for key, _ in _unwalked(ranked, walker, budget))
    if budget.max_neighbors_per_key > 0:
        await _fetch_keys(graph, caches, keys, budget)


async def walk(
    seeds: Sequence[Seed],
    graph: GraphView,
    *,
    now_ms: int,
    field_digest: Sequence[str] = (),
    budget: WalkBudget = WalkBudget(),
    weights: KeyWeights = DEFAULT_WEIGHTS,
    circuits: Sequence[Circuit] = (),
    field_bonus: float = DEFAULT_FIELD_BONUS,
    recency_half_life_ms: int = DEFAULT_HALF_LIFE_MS,
) -> list[Related]:
    """Related memories reached from `seeds`, best first (see the module docstring)."""
    if field_bonus <= 0.0:
        raise ValueError(f"field_bonus must be > 0, got {field_bonus}")
    if recency_half_life_ms <= 0:
        raise ValueError(f"recency_half_life_ms must be > 0, got {recency_half_life_ms}")
    if (
        not seeds
        or budget.num_walkers == 0
        or budget.max_hops == 0
        or budget.max_total_candidates == 0
    ):
        return []

    best_seed: dict[str, float] = {}
    for seed in seeds:
        if seed.memory_id not in best_seed or seed.score > best_seed[seed.memory_id]:
            best_seed[seed.memory_id] = seed.score
    seed_ids = frozenset(best_seed)
    caches = _Caches(linker=graph if isinstance(graph, KeyLinks) else None)
    await _load_nodes(graph, caches, seed_ids)
    usable = sorted(
        (i for i in seed_ids if _live(caches, i) is not None),
        key=lambda i: (-best_seed[i], i),
    )
    if not usable:
        return []

    walkers = [
        _Walker(
            index=w,
            circuit=circuits[w % len(circuits)] if circuits else None,
            frontier={usable[w % len(usable)]: (best_seed[usable[w % len(usable)]], 0)},
        )
        for w in range(budget.num_walkers)
    ]
    ranking = _KeyRanking(frozenset(field_digest), weights, field_bonus, tuple(circuits))
    expanded_under: set[tuple[str, tuple[tuple[str, float], ...]]] = set()
    hits: dict[str, _Hit] = {}
    cap = budget.max_total_candidates

    def admit(
        walker: _Walker,
        child_hops: int,
        scores: dict[str, float],
        via: dict[str, list[str]],
        links: Mapping[str, str],
    ) -> None:
        fresh = [i for i in scores if i not in hits and i not in seed_ids]
        room = cap - len(hits)
        if len(fresh) > room:
            # The cap binds: the best-scored new candidates are admitted.
            fresh = heapq.nsmallest(room, fresh, key=lambda i: (-scores[i], i))
        index = walker.index
        for child_id in fresh:
            hits[child_id] = _Hit(scores[child_id], child_hops, index, set(via[child_id]))
            if links:
                hits[child_id].facts.update(links[k] for k in via[child_id] if k in links)
        frontier, expanded = walker.frontier, walker.expanded
        admitted = set(fresh)
        for child_id, score in scores.items():
            if child_id not in admitted:
                hit = hits.get(child_id)
                if hit is None:
                    continue  # a seed, or left out by the cap: not walked either
                # Best score wins; ties go to fewer hops, then the lower walker.
                if score > hit.score or (
                    score == hit.score
                    and (child_hops < hit.hops or (child_hops == hit.hops and index < hit.walker))
                ):
                    hit.score, hit.hops, hit.walker = score, child_hops, index
                hit.keys.update(via[child_id])
                if links:
                    hit.facts.update(links[k] for k in via[child_id] if k in links)
            prev = frontier.get(child_id)
            if prev is None:
                frontier[child_id] = (score, child_hops)
            elif child_id not in expanded:
                prev_score, prev_hops = prev
                if score > prev_score or child_hops < prev_hops:
                    frontier[child_id] = (
                        score if score > prev_score else prev_score,
                        child_hops if child_hops < prev_hops else prev_hops,
                    )

    async def step(walker: _Walker) -> None:
        """Expand until one real expansion is spent or nothing is left to expand."""
        while True:
            memory_id = _next_choice(walker, budget.max_hops)
            if memory_id is None:
                walker.done = True
                return
            strength, hops = walker.frontier[memory_id]
            walker.expanded.add(memory_id)
            node = _live(caches, memory_id)
            if node is None:
                continue
            ranked = _unwalked(
                await _ranked_keys(graph, caches, node, walker, ranking), walker, budget
            )
            walker.walked_keys.update(key for key, _ in ranked)
            marker = (memory_id, tuple(ranked))
            free = marker in expanded_under
            expanded_under.add(marker)
            if ranked and budget.max_neighbors_per_key > 0:
                await _fetch_keys(graph, caches, (key for key, _ in ranked), budget)
                scores, via = _neighbours(
                    caches,
                    node,
                    strength,
                    ranked,
                    now_ms=now_ms,
                    half_life_ms=recency_half_life_ms,
                )
                admit(walker, hops + 1, scores, via, caches.node_links.get(memory_id, {}))
            if not free:
                walker.steps += 1
                if walker.steps >= budget.max_hops:
                    walker.done = True
                return

    while any(not w.done for w in walkers):
        await _prefetch_round(graph, caches, walkers, budget=budget, ranking=ranking)
        for walker in walkers:
            if not walker.done:
                await step(walker)

    related = [
        Related(
            memory_id=memory_id,
            score=hit.score,
            via_keys=tuple(sorted(hit.keys)),
            hops=hit.hops,
            walker=hit.walker,
            via_facts=tuple(sorted(hit.facts)) if hit.facts else (),
        )
        for memory_id, hit in hits.items()
    ]
    related.sort(key=lambda r: (-r.score, r.memory_id))
    return related
