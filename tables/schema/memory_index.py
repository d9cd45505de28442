"""The memory index schema, kept as data (memory_index.yaml) and specialised per prefix."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml
from redisvl.schema import IndexSchema

from grimoire.tables.keyspace import Keyspace


def memory_schema_dict(prefix: str, dims: int, name: str | None = None) -> dict[str, Any]:
    """The schema for `prefix`; `name` names the index otherwise (a cluster master's
    index, `grimoire.tables.routing`)."""
    raw = yaml.safe_load(
        resources.files("grimoire.tables.schema").joinpath("memory_index.yaml").read_text()
    )
    keys = Keyspace(prefix)
    raw["index"]["name"] = name or keys.index_name
    raw["index"]["prefix"] = keys.memory_prefix
    for field in raw["fields"]:
        if field["type"] == "vector":
            field["attrs"]["dims"] = dims
    return raw


def memory_schema(prefix: str, dims: int = 384, name: str | None = None) -> IndexSchema:
    return IndexSchema.from_dict(memory_schema_dict(prefix, dims, name))
