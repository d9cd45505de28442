"""An agent's runtime configuration: partial updates merged and validated whole,
stored as what differs from the defaults, parsed from `configure` commands."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.streams.config.agent_config import (
    AgentConfig,
    apply_update,
    config_from_json,
    config_to_json,
)
from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.command import CommandKind, parse_command
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.validators import InputLimits


def test_an_update_sets_what_it_names_and_null_resets_to_the_default() -> None:
    config = apply_update(AgentConfig(), {"ingest_enabled": False, "top_k": 3})
    assert (config.ingest_enabled, config.top_k, config.retrieval_enabled) == (False, 3, True)
    assert not config.ingests and config.retrieves
    config = apply_update(config, {"top_k": None, "layers": ["output", "input", "output"]})
    assert (config.top_k, config.layers) == (None, ("input", "output"))
    assert not apply_update(config, {"memory_enabled": False}).retrieves


def test_lane_weights_are_kept_sorted_by_lane() -> None:
    config = apply_update(AgentConfig(), {"lane_weights": {"walk": 0, "bm25": 2}})
    assert config.lane_weights == (("bm25", 2.0), ("walk", 0.0))


@pytest.mark.parametrize(
    ("update", "reason", "where"),
    [
        ({}, "invalid_value", "config"),
        ({"colour": "red"}, "invalid_value", "config.colour"),
        ({"ingest_enabled": "no"}, "wrong_type", "config.ingest_enabled"),
        ({"ingest_enabled": 0}, "wrong_type", "config.ingest_enabled"),
        ({"top_k": 0}, "invalid_value", "config.top_k"),
        ({"top_k": 201}, "invalid_value", "config.top_k"),
        ({"top_k": True}, "wrong_type", "config.top_k"),
        ({"top_k": 2.5}, "wrong_type", "config.top_k"),
        ({"time_window_ms": -1}, "invalid_value", "config.time_window_ms"),
        ({"layers": []}, "wrong_type", "config.layers"),
        ({"layers": ["dream"]}, "invalid_value", "config.layers"),
        ({"lane_weights": {"gut": 1}}, "invalid_value", "config.lane_weights"),
        ({"lane_weights": {"bm25": 11}}, "invalid_value", "config.lane_weights"),
        ({"lane_weights": {"bm25": "1"}}, "wrong_type", "config.lane_weights"),
    ],
)
def test_a_bad_update_is_refused_with_its_field(update: Any, reason: str, where: str) -> None:
    with pytest.raises(InvalidEvent) as caught:
        apply_update(AgentConfig(), update)
    assert (caught.value.reason, caught.value.field) == (reason, where)


def test_the_stored_form_holds_only_what_differs_and_round_trips() -> None:
    assert config_to_json(AgentConfig()) == {}
    config = apply_update(AgentConfig(), {"retrieval_enabled": False, "time_window_ms": 60_000})
    stored = config_to_json(config)
    assert stored == {"retrieval_enabled": False, "time_window_ms": 60_000}
    assert config_from_json(orjson.loads(orjson.dumps(stored))) == config
    assert config_from_json({}) == AgentConfig()


def _command(**fields: Any) -> bytes:
    return orjson.dumps({"agent_id": "agent-1", "command": "configure", **fields})


def test_a_configure_command_carries_its_update() -> None:
    command = parse_command(_command(config={"ingest_enabled": False}), InputLimits())
    assert not isinstance(command, Rejection)
    assert command.kind is CommandKind.CONFIGURE
    assert command.config == {"ingest_enabled": False}


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({}, "missing_field"),
        ({"config": {"top_k": "ten"}}, "wrong_type"),
        ({"config": {"unknown": 1}}, "invalid_value"),
        ({"config": []}, "invalid_value"),
    ],
)
def test_a_bad_configure_command_is_refused_before_the_journal_applies_it(
    fields: dict[str, Any], reason: str
) -> None:
    command = parse_command(_command(**fields), InputLimits())
    assert isinstance(command, Rejection) and command.reason == reason
