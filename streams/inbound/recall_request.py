"""Validation of recall requests into a frozen query value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.events import UNSUPPORTED_SCHEMA, Rejection, decode_object
from grimoire.streams.inbound.validators import (
    INVALID_VALUE,
    WRONG_TYPE,
    Fields,
    InputLimits,
    plausible_agent_id,
)
from grimoire.streams.model.records import Kind, Layer
from grimoire.streams.recall.options import (
    NO_FILTERS,
    ProvenanceFilters,
    RetrievalBudgets,
    RetrievalMode,
    StateOverride,
)
from grimoire.streams.recall.walk.circuits import circuits_for
from grimoire.streams.recall.walk.daimoi import WalkBudget

RECALL_REQUEST_SCHEMA = "grimoire.recall_request/1"
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# What follows the deployment's reply namespace (`TopicNames.reply_topic`): one
# client id, no dots, so a reply can only land on a client's own reply topic.
_CLIENT_ID = re.compile(r"[A-Za-z0-9_-]+")
_LANE_BUDGETS = ("canonical_k", "eidolon_k", "bm25_k")
_WALK_BUDGETS = tuple(f.name for f in fields(WalkBudget))


@dataclass(frozen=True, slots=True)
class RecallLimits:
    """Defaults and ceilings; a request above a ceiling is rejected, never clipped."""

    defaults: RetrievalBudgets = field(default_factory=RetrievalBudgets)
    max_k: int = 100
    max_query_chars: int = 4_000
    max_lane_k: int = 500
    max_token_budget: int = 200_000
    # A reply is one Kafka record: the producer refuses one over 1 MiB, so a reply
    # is cut to this many bytes (tail items first, then full texts) and says so.
    max_reply_bytes: int = 512 * 1024
    max_walk: WalkBudget = field(
        default_factory=lambda: WalkBudget(
            num_walkers=64,
            max_hops=6,
            max_keys_per_node=32,
            max_neighbors_per_key=200,
            max_total_candidates=5_000,
        )
    )


@dataclass(frozen=True, slots=True)
class RecallQuery:
    agent_id: str
    query: str
    reply_to: str
    correlation_id: str
    as_of_ms: int | None = None
    filters: ProvenanceFilters = NO_FILTERS
    budgets: RetrievalBudgets = field(default_factory=RetrievalBudgets)
    state: StateOverride = field(default_factory=StateOverride)
    mode: RetrievalMode = RetrievalMode.AUTO
    explain: bool = False
    expand_episodes: bool = False
    record_usage: bool = True
    # The run this recall serves (the caller acts on the answer within it): the
    # run's outcome credits what was returned, and learns from how it was ranked.
    serving_run_id: str = ""
    include_causal: bool = False  # attach each item's causal edges

    @property
    def k(self) -> int:
        return self.budgets.max_items


def reply_address(data: Fields, reply_namespace: str | None = None) -> tuple[str, str]:
    """The request's (reply_to, correlation_id), both validated, or InvalidEvent.

    `reply_namespace` is the deployment's reply-topic prefix (`{prefix}.replies.`):
    a reply goes only to a topic in it, never to another deployment's topics, to
    `memory-events` or to a topic the broker would auto-create. None (a parser
    used on its own, e.g. by the SDK's contract tests) checks the topic name only.
    Any client may still name another client's reply topic: tying reply_to to the
    caller needs per-tenant keys (a later issue).
    """
    reply_to = data.identifier("reply_to", required=True)
    if not _TOPIC_NAME.match(reply_to):
        raise InvalidEvent(INVALID_VALUE, "'reply_to' is not a valid topic name", "reply_to")
    if reply_namespace is not None and not (
        reply_to.startswith(reply_namespace)
        and _CLIENT_ID.fullmatch(reply_to[len(reply_namespace) :])
    ):
        raise InvalidEvent(
            INVALID_VALUE, f"'reply_to' must be {reply_namespace}<client id>", "reply_to"
        )
    # Echoed in the reply: an id of at most max_id_chars, so the reply stays small.
    correlation_id = data.identifier("correlation_id", required=True)
    return reply_to, correlation_id


def parse_recall_request(
    raw: bytes,
    limits: RecallLimits,
    input_limits: InputLimits,
    *,
    reply_namespace: str | None = None,
) -> RecallQuery | Rejection:
    agent_id: str | None = None
    try:
        data = Fields(decode_object(raw), input_limits)
        agent_id = plausible_agent_id(data.data, data.limits)
        schema = data.text("schema")
        if schema and schema != RECALL_REQUEST_SCHEMA:
            raise InvalidEvent(UNSUPPORTED_SCHEMA, f"expected {RECALL_REQUEST_SCHEMA}", "schema")
        reply_to, correlation_id = reply_address(data, reply_namespace)
        return RecallQuery(
            agent_id=data.agent_id(),
            query=data.text("query", required=True, max_chars=limits.max_query_chars),
            reply_to=reply_to,
            correlation_id=correlation_id,
            as_of_ms=data.timestamp_ms("as_of") if data.data.get("as_of") is not None else None,
            filters=_filters(_section(data, "filters")),
            budgets=_budgets(data, limits),
            state=_state(_section(data, "state")),
            mode=_mode(data.text("mode")),
            explain=_flag(data, "explain", False),
            expand_episodes=_flag(data, "expand_episodes", False),
            record_usage=_flag(data, "record_usage", True),
            serving_run_id=data.identifier("serving_run_id"),
            include_causal=_flag(data, "include_causal", False),
        )
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)


def _section(data: Fields, name: str) -> Fields | None:
    section: Mapping[str, Any] | None = data.mapping(name)
    return None if section is None else Fields(section, data.limits)


def _flag(data: Fields, name: str, default: bool) -> bool:
    value = data.data.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidEvent(WRONG_TYPE, f"{name!r} must be true or false", name)
    return value


def _mode(value: str) -> RetrievalMode:
    if not value:
        return RetrievalMode.AUTO
    try:
        return RetrievalMode(value)
    except ValueError:
        known = ", ".join(m.value for m in RetrievalMode)
        raise InvalidEvent(INVALID_VALUE, f"'mode' must be one of {known}", "mode") from None


def _choices(section: Fields, name: str, allowed: frozenset[str]) -> tuple[str, ...]:
    values = section.string_list(name)
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise InvalidEvent(
            INVALID_VALUE, f"unknown {name}: {', '.join(unknown)}", f"filters.{name}"
        )
    return tuple(sorted(set(values)))


def _filters(section: Fields | None) -> ProvenanceFilters:
    if section is None:
        return NO_FILTERS
    present = section.data

    def bound(name: str) -> int | None:
        return section.timestamp_ms(name) if present.get(name) is not None else None

    filters = ProvenanceFilters(
        since_ms=bound("since"),
        until_ms=bound("until"),
        session_id=section.identifier("session_id"),
        run_id=section.identifier("run_id"),
        actor_id=section.identifier("actor_id"),
        event_type_prefix=section.identifier("event_type_prefix"),
        kinds=_choices(section, "kinds", frozenset(k.value for k in Kind)),
        layers=_choices(section, "layers", frozenset(la.value for la in Layer)),
    )
    if (
        filters.since_ms is not None
        and filters.until_ms is not None
        and filters.since_ms > filters.until_ms
    ):
        raise InvalidEvent(INVALID_VALUE, "'since' is after 'until'", "filters.since")
    return filters


def _bounded(section: Fields, name: str, ceiling: int, where: str) -> int | None:
    value = section.integer(name)
    if value is not None and value > ceiling:
        raise InvalidEvent(INVALID_VALUE, f"'{name}' must be <= {ceiling}", where)
    return value


def _budgets(data: Fields, limits: RecallLimits) -> RetrievalBudgets:
    budgets = limits.defaults
    section = _section(data, "budgets") or Fields({}, data.limits)
    lanes = {
        name: value
        for name in _LANE_BUDGETS
        if (value := _bounded(section, name, limits.max_lane_k, f"budgets.{name}")) is not None
    }
    walk = {
        name: value
        for name in _WALK_BUDGETS
        if (value := _bounded(section, name, getattr(limits.max_walk, name), f"budgets.{name}"))
        is not None
    }
    max_items = _bounded(section, "max_items", limits.max_k, "budgets.max_items")
    shorthand = _bounded(data, "k", limits.max_k, "k")
    if shorthand is not None and max_items is not None and shorthand != max_items:
        raise InvalidEvent(INVALID_VALUE, "'k' and 'budgets.max_items' disagree", "k")
    if shorthand == 0:
        raise InvalidEvent(INVALID_VALUE, "'k' must be >= 1", "k")
    tokens = _bounded(section, "token_budget", limits.max_token_budget, "budgets.token_budget")
    full = _bounded(section, "full_text_items", limits.max_k, "budgets.full_text_items")
    return replace(
        budgets,
        walk=replace(budgets.walk, **walk),
        max_items=max_items if max_items is not None else shorthand or budgets.max_items,
        token_budget=budgets.token_budget if tokens is None else tokens,
        full_text_items=budgets.full_text_items if full is None else full,
        **lanes,
    )


def _state(section: Fields | None) -> StateOverride:
    if section is None:
        return StateOverride()
    digest = section.string_list("digest") if section.data.get("digest") is not None else None
    regime = section.identifier("regime") if section.data.get("regime") is not None else None
    circuit = section.identifier("circuit")
    circuits_for(circuit)  # an unknown name is the caller's mistake: reject it now
    return StateOverride(
        digest=digest, regime=regime, affect=section.affect("affect"), circuit=circuit
    )
