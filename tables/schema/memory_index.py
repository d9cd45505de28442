"""The memory index schema, kept as data (memory_index.yaml) and specialised per prefix."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml
from redisvl.schema import IndexSchema


def memory_schema_dict(prefix: str, dims: int) -> dict[str, Any]:
    raw = yaml.safe_load(
        resources.files("grimoire.tables.schema").joinpath("memory_index.yaml").read_text()
    )
    raw["index"]["name"] = raw["index"]["name"].format(prefix=prefix)
    raw["index"]["prefix"] = raw["index"]["prefix"].format(prefix=prefix)
    for field in raw["fields"]:
        if field["type"] == "vector":
            field["attrs"]["dims"] = dims
    return raw


def memory_schema(prefix: str, dims: int = 384) -> IndexSchema:
    return IndexSchema.from_dict(memory_schema_dict(prefix, dims))
