"""An agent's runtime configuration as stored (`Keyspace.agent_config`): the JSON
object of the settings that differ from the defaults."""

from __future__ import annotations

import orjson

from grimoire.streams.config.agent_config import AgentConfig, config_from_json, config_to_json
from grimoire.streams.exceptions import InvalidEvent
from grimoire.tables.exceptions import CorruptRecord

__all__ = ["decode_agent_config", "encode_agent_config"]


def encode_agent_config(config: AgentConfig) -> bytes:
    return orjson.dumps(config_to_json(config), option=orjson.OPT_SORT_KEYS)


def decode_agent_config(raw: bytes | str | None) -> AgentConfig:
    if raw is None:
        return AgentConfig()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptRecord(f"stored configuration is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptRecord("stored configuration is not a JSON object")
    try:
        return config_from_json(data)
    except InvalidEvent as exc:
        raise CorruptRecord(f"stored configuration is invalid: {exc.detail}") from exc
