"""TODO"""

from __future__ import annotations

from dataclasses import asdict

import orjson

from grimoire.streams.maintenance.compaction import (
    ClusterPlan,
    CompactionPlan,
)


def encode_plan(plan: CompactionPlan) -> bytes:
    return orjson.dumps(asdict(plan))


def decode_plan(raw: bytes | str) -> CompactionPlan:
    data = orjson.loads(raw)
    clusters = tuple(
        ClusterPlan(
            **{
                **c,
                **{name: tuple(c[name]) for name in ("source_ids", "summary_of", "tags", "keys")},
            }
        )
        for c in data["clusters"]
    )
    return CompactionPlan(plan_id=data["plan_id"], now_ms=data["now_ms"], clusters=clusters)
