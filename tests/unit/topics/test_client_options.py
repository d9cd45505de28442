"""The SDK's typed recall options: their wire objects, and that the worker's own parser
reads back exactly what they say (so the two sides cannot drift apart silently)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from grimoire.streams.inbound.recall_request import (
    RecallLimits,
    RecallQuery,
    parse_recall_request,
)
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.model.field_state import Affect
from grimoire.streams.model.records import Kind, Layer
from grimoire.streams.recall import options as worker
from grimoire.streams.recall.walk.circuits import CIRCUITS
from grimoire.streams.recall.walk.daimoi import WalkBudget
from grimoire.topics.client import GrimoireClient
from grimoire.topics.options import (
    RecallAffect,
    RecallBudgets,
    RecallFilters,
    RecallMode,
    RecallState,
)
from grimoire.topics.schemas import RecallRequestV1
from tests.architecture.layering import TOPICS_FORBIDDEN

TS = 1_767_225_600_000
LIMITS = RecallLimits()
INPUT = InputLimits()


def parse(
    *,
    filters: RecallFilters | None = None,
    budgets: RecallBudgets | None = None,
    state: RecallState | None = None,
    k: int | None = None,
) -> RecallQuery:
    """What the worker makes of a request carrying these options."""
    raw = RecallRequestV1(
        agent_id="a",
        query="q",
        reply_to="grimoire.replies.t",
        correlation_id="c",
        k=k,
        filters=None if filters is None else filters.to_wire(),
        budgets=None if budgets is None else budgets.to_wire(),
        state=None if state is None else state.to_wire(),
    ).dumps_json()
    parsed = parse_recall_request(raw, LIMITS, INPUT)
    assert isinstance(parsed, RecallQuery), parsed
    return parsed


# -- wire objects -------------------------------------------------------------------


def test_empty_options_say_nothing() -> None:
    assert RecallFilters().to_wire() == {}
    assert RecallBudgets().to_wire() == {}
    assert RecallState().to_wire() == {}


def test_filters_wire() -> None:
    filters = RecallFilters(
        since=TS,
        until=datetime(2026, 1, 2, tzinfo=UTC),
        session_id="s1",
        run_id="r1",
        actor_id="ops",
        event_type_prefix="tool",
        kinds=[Kind.INSIGHT, "episode"],
        layers=("action",),
    )
    assert filters.to_wire() == {
        "since": TS,
        "until": TS + 86_400_000,
        "session_id": "s1",
        "run_id": "r1",
        "actor_id": "ops",
        "event_type_prefix": "tool",
        "kinds": ["episode", "insight"],
        "layers": ["action"],
    }
    assert filters.kinds == ("episode", "insight")  # plain values, sorted as the worker has them
    assert filters == dataclasses.replace(filters, kinds={"insight", Kind.EPISODE, "episode"})
    assert hash(filters) == hash(dataclasses.replace(filters))  # a value, usable as a key


def test_an_aware_datetime_is_the_same_instant_in_any_zone() -> None:
    here = datetime(2026, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=1)))
    assert RecallFilters(since=here).to_wire() == {"since": TS}


def test_budgets_wire_keeps_only_what_is_set() -> None:
    budgets = RecallBudgets(eidolon_k=5, max_hops=1, token_budget=300, full_text_items=0)
    assert budgets.to_wire() == {
        "eidolon_k": 5,
        "max_hops": 1,
        "token_budget": 300,
        "full_text_items": 0,
    }


def test_state_wire() -> None:
    state = RecallState(
        digest=["err:timeout"],
        regime="bear",
        affect=RecallAffect(pleasure=-0.5, drives={"SEEKING": 0.6, "CARE": 1}),
        circuit="causal",
    )
    assert state.to_wire() == {
        "digest": ["err:timeout"],
        "regime": "bear",
        "affect": {
            "pleasure": -0.5,
            "arousal": 0.0,
            "dominance": 0.0,
            "CARE": 1.0,
            "SEEKING": 0.6,
        },
        "circuit": "causal",
    }
    assert RecallState(digest=()).to_wire() == {"digest": []}  # an empty focus is sent


def test_mode_literal_matches_the_worker() -> None:
    assert set(typing.get_args(RecallMode)) == {m.value for m in worker.RetrievalMode}


def test_option_fields_mirror_the_worker() -> None:
    worker_budgets = {f.name for f in dataclasses.fields(worker.RetrievalBudgets)} - {"walk"}
    walk = {f.name for f in dataclasses.fields(WalkBudget)}
    assert {f.name for f in dataclasses.fields(RecallBudgets)} == worker_budgets | walk
    renamed = {"since_ms": "since", "until_ms": "until"}
    worker_filters = {
        renamed.get(f.name, f.name) for f in dataclasses.fields(worker.ProvenanceFilters)
    }
    assert {f.name for f in dataclasses.fields(RecallFilters)} == worker_filters
    assert {f.name for f in dataclasses.fields(RecallState)} == {
        f.name for f in dataclasses.fields(worker.StateOverride)
    }


# -- checks made at the call site ------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: RecallFilters(since=TS + 1, until=TS), ValueError),
        (lambda: RecallFilters(since=datetime(2026, 1, 1)), ValueError),  # naive
        (lambda: RecallFilters(since=True), TypeError),
        (lambda: RecallFilters(since=-1), ValueError),
        (lambda: RecallFilters(session_id="two words"), ValueError),
        (lambda: RecallFilters(actor_id=""), ValueError),
        (lambda: RecallFilters(run_id=7), TypeError),
        (lambda: RecallFilters(kinds=["epsiode"]), ValueError),
        (lambda: RecallFilters(kinds="episode"), TypeError),  # a str, not a sequence of str
        (lambda: RecallFilters(layers=["middle"]), ValueError),
        (lambda: RecallBudgets(max_items=-1), ValueError),
        (lambda: RecallBudgets(token_budget=2.5), TypeError),
        (lambda: RecallBudgets(max_hops=False), TypeError),
        (lambda: RecallState(regime="bull market"), ValueError),
        (lambda: RecallState(digest="err:timeout"), TypeError),
        (lambda: RecallState(affect={"pleasure": 0.1}), TypeError),
        (lambda: RecallAffect(arousal=1.5), ValueError),
        (lambda: RecallAffect(drives={"SEEKING": -0.1}), ValueError),
        (lambda: RecallAffect(drives={"pleasure": 0.5}), ValueError),
    ],
)
def test_invalid_options_fail_where_they_are_built(build: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        build()


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        RecallBudgets().max_items = 3  # type: ignore[misc]


# -- round trip through the worker's parser ----------------------------------------------


def test_filters_round_trip() -> None:
    # What reads the same on both sides; the time bounds are named apart, and the
    # worker sorts the kinds.
    same = {"session_id": "s1", "run_id": "r1", "actor_id": "ops", "event_type_prefix": "tool"}
    filters = RecallFilters(
        since=TS, until=TS + 1_000, kinds=["insight", "episode"], layers=["action"], **same
    )
    assert parse(filters=filters).filters == worker.ProvenanceFilters(
        since_ms=TS, until_ms=TS + 1_000, kinds=("episode", "insight"), layers=("action",), **same
    )
    assert parse(filters=RecallFilters()).filters == worker.NO_FILTERS


def test_every_kind_and_layer_is_accepted_by_the_worker() -> None:
    filters = RecallFilters(kinds=list(Kind), layers=list(Layer))
    parsed = parse(filters=filters).filters
    assert set(parsed.kinds) == {k.value for k in Kind}
    assert set(parsed.layers) == {la.value for la in Layer}


def test_budgets_round_trip() -> None:
    # A value of its own per field, so a field read into another's place shows.
    lanes = {"canonical_k": 11, "eidolon_k": 12, "bm25_k": 13}
    walk = {
        "num_walkers": 4,
        "max_hops": 3,
        "max_keys_per_node": 5,
        "max_neighbors_per_key": 7,
        "max_total_candidates": 99,
    }
    rest = {"max_items": 6, "token_budget": 300, "full_text_items": 1}
    # Flat in the SDK's options, the walk's nested in the worker's budgets.
    budgets = RecallBudgets(**lanes, **walk, **rest)
    assert parse(budgets=budgets).budgets == worker.RetrievalBudgets(
        **lanes, walk=WalkBudget(**walk), **rest
    )
    assert parse(budgets=RecallBudgets()).budgets == LIMITS.defaults
    assert parse(budgets=RecallBudgets(max_items=4), k=4).k == 4  # agreeing is fine


def test_state_round_trip() -> None:
    state = RecallState(
        digest=["err:timeout", "tool:bash"],
        regime="bear",
        affect=RecallAffect(pleasure=0.25, dominance=-1, drives={"CARE": 0.8}),
        circuit="causal",
    )
    assert parse(state=state).state == worker.StateOverride(
        digest=("err:timeout", "tool:bash"),
        regime="bear",
        affect=Affect(pleasure=0.25, arousal=0.0, dominance=-1.0, drives=(("CARE", 0.8),)),
        circuit="causal",
    )
    assert parse(state=RecallState()).state == worker.StateOverride()


@pytest.mark.parametrize("circuit", sorted(CIRCUITS))
def test_every_known_circuit_is_accepted(circuit: str) -> None:
    assert parse(state=RecallState(circuit=circuit)).state.circuit == circuit


def test_a_ceiling_is_left_to_the_worker() -> None:
    # Configurable on the worker, so the SDK does not guess it: the worker rejects.
    raw = RecallRequestV1(
        agent_id="a",
        query="q",
        reply_to="r",
        correlation_id="c",
        budgets=RecallBudgets(max_items=LIMITS.max_k + 1).to_wire(),
    ).dumps_json()
    rejected = parse_recall_request(raw, LIMITS, INPUT)
    assert not isinstance(rejected, RecallQuery)
    assert (rejected.reason, rejected.field) == ("invalid_value", "budgets.max_items")


# -- the client --------------------------------------------------------------------------


class Loopback(GrimoireClient):
    """A client whose "broker" is the worker's parser: it answers every request itself."""

    def __init__(self) -> None:
        super().__init__("unused:9092", "t")
        self.queries: list[RecallQuery] = []

    async def publish_raw(self, topic: str, key: str, value: bytes, *, wait: bool = True) -> None:
        assert topic == self.topics.recall_requests
        query = parse_recall_request(value, LIMITS, INPUT)
        assert isinstance(query, RecallQuery), query
        self.queries.append(query)
        item = {
            "id": "m-1",
            "agent_id": query.agent_id,
            "kind": "episode",
            "layer": "observation",
            "gist": "disk full",
            "ts": TS,
            "score": 0.9,
            "lanes": ["canonical"],
            "source_event_id": "ev-1",
            "text": None,
            "a_field_from_a_newer_worker": 1,
        }
        reply = {"correlation_id": query.correlation_id, "agent_id": key, "items": [item]}
        self._pending[query.correlation_id].set_result(orjson.loads(orjson.dumps(reply)))


async def test_recall_sends_the_typed_options() -> None:
    client = Loopback()
    answer = await client.recall(
        "agent-1",
        "disk",
        filters=RecallFilters(session_id="s1", kinds=[Kind.WARNING]),
        budgets=RecallBudgets(max_items=3, token_budget=500),
        state=RecallState(regime="bear"),
        mode="light",
    )
    (query,) = client.queries
    assert query.filters == worker.ProvenanceFilters(session_id="s1", kinds=("warning",))
    assert (query.k, query.budgets.token_budget) == (3, 500)
    assert query.state == worker.StateOverride(regime="bear")
    assert query.mode is worker.RetrievalMode.LIGHT
    (item,) = answer.items
    assert (item.id, item.text, item.source_event_id) == ("m-1", None, "ev-1")
    assert client._pending == {}


async def test_empty_options_are_left_out_of_the_request() -> None:
    client = Loopback()
    await client.recall("agent-1", "disk", filters=RecallFilters(), budgets=RecallBudgets())
    (query,) = client.queries
    assert query.filters == worker.NO_FILTERS
    assert query.budgets == LIMITS.defaults


@pytest.mark.parametrize("section", ["filters", "budgets", "state"])
async def test_recall_takes_typed_options_only(section: str) -> None:
    client = Loopback()
    with pytest.raises(TypeError, match=section):
        await client.recall("agent-1", "disk", **{section: {"session_id": "s1"}})
    assert client.queries == []


# Everything the worker needs and an agent must not pay for (the `worker` extra): what
# the layering rules keep out of `topics`, and the worker's settings and CLI stack.
HEAVY = tuple(sorted(TOPICS_FORBIDDEN | {"pydantic", "pydantic_settings", "yaml", "click"}))


def test_the_sdk_imports_with_the_worker_stack_missing() -> None:
    # In-process check of what tests/integration/test_light_client.py proves with a real
    # venv: a finder that refuses the heavy packages, then the whole SDK surface.
    code = f"""
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {HEAVY!r}:
            raise ImportError(f"{{name}} is not installed in a light client")

sys.meta_path.insert(0, Refuse())
import grimoire.topics
import grimoire.topics.client, grimoire.topics.declarations
import grimoire.topics.options, grimoire.topics.schemas
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
