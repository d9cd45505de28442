"""Compaction planning: eligibility, scoring, key-centred clusters, and what a
summary keeps (pure; no services)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from grimoire.streams.maintenance.compaction import (
    DAY_MS,
    CompactionBudget,
    CompactionCandidate,
    CompactionPolicy,
    candidate_score,
    decayed_usage,
    eligible,
    paused,
    plan_compaction,
)
from grimoire.streams.maintenance.compaction_summary import (
    SummarySource,
    rolled_up_keys,
    rolled_up_tags,
    summary_id,
    summary_text,
)
from grimoire.tables.codec.compaction_plan import decode_plan, encode_plan

T0 = 1_790_006_400_000 - (1_790_006_400_000 % DAY_MS)  # a day boundary
NOW = T0 + 30 * DAY_MS
POLICY = CompactionPolicy(min_age_ms=7 * DAY_MS, min_cluster_size=3, max_cluster_size=10)


def cand(n: int, *keys: str, ts: int = T0, **extra: object) -> CompactionCandidate:
    fields: dict[str, object] = {"text": f"the disk on node {n} filled up again", "kind": "episode"}
    fields.update(extra)
    return CompactionCandidate(
        memory_id=f"m{n:03d}",
        ts_ms=ts + n * 1000,
        keys=keys,
        **fields,  # type: ignore[arg-type]
    )


def test_eligibility_excludes_protected_young_and_summaries() -> None:
    base = cand(1, "err:oom")
    assert eligible(base, NOW, POLICY)
    for flag in ("pinned", "locked", "deleted", "archived", "quarantined"):
        assert not eligible(replace(base, **{flag: True}), NOW, POLICY), flag
    assert not eligible(replace(base, kind="aggregate"), NOW, POLICY)
    assert not eligible(replace(base, kind="summary", summary_level=1), NOW, POLICY)
    assert not eligible(replace(base, ts_ms=NOW - DAY_MS), NOW, POLICY)
    higher = replace(POLICY, summary_level=1)
    assert eligible(replace(base, kind="summary", summary_level=1), NOW, higher)
    assert not eligible(replace(base, kind="summary", summary_level=2), NOW, higher)
    assert not eligible(base, NOW, higher)  # plain memories never join a higher level


def test_usage_decays_per_whole_day_since_last_inclusion() -> None:
    used = replace(cand(1), included_count_decay=10.0, last_accessed_ms=NOW - 4 * DAY_MS - 5)
    assert decayed_usage(used, NOW, POLICY) == pytest.approx(10.0 * 0.95**4)
    fresh = replace(used, last_accessed_ms=NOW - DAY_MS + 1)  # under a day: no decay yet
    assert decayed_usage(fresh, NOW, POLICY) == 10.0


def test_score_prefers_old_unused_and_spammy() -> None:
    base = cand(1)
    older = replace(base, ts_ms=base.ts_ms - 5 * DAY_MS)
    used = replace(base, included_count_decay=3.0, last_accessed_ms=NOW)
    spam = replace(base, quality=0.05)
    score = candidate_score(base, NOW, POLICY)
    assert candidate_score(older, NOW, POLICY) > score
    assert candidate_score(used, NOW, POLICY) == pytest.approx(score - 6.0)
    assert candidate_score(spam, NOW, POLICY) > score
    assert candidate_score(replace(base, off_topic=True), NOW, POLICY) > score


def test_clusters_centre_on_the_hottest_key_inside_one_day() -> None:
    day1 = [cand(n, "err:oom", f"entity:n{n}") for n in range(4)]
    day2 = [cand(10 + n, "err:oom", ts=T0 + DAY_MS) for n in range(3)]
    other = [cand(20 + n, "chan:ops") for n in range(3)]
    plan = plan_compaction([*day1, *day2, *other], {}, NOW, POLICY)
    got = {(c.centre_key, c.bucket_start_ms): c.source_ids for c in plan.clusters}
    assert got == {
        ("err:oom", T0): tuple(c.memory_id for c in day1),
        ("err:oom", T0 + DAY_MS): tuple(c.memory_id for c in day2),
        ("chan:ops", T0): tuple(c.memory_id for c in other),
    }
    # err (weight 3.0) outranks chan (1.3) for the same score mass.
    assert plan.clusters[0].centre_key == "err:oom"
    week = plan_compaction([*day1, *day2], {}, NOW, replace(POLICY, window="week"))
    assert [len(c.source_ids) for c in week.clusters] == [7]


def test_small_groups_hubs_and_used_memories_do_not_cluster() -> None:
    pair = [cand(n, "err:oom") for n in range(2)]
    assert plan_compaction(pair, {}, NOW, POLICY).empty
    hub = [cand(n, "tag:topic/chat") for n in range(5)]
    assert plan_compaction(hub, {"tag:topic/chat": 500}, NOW, POLICY).empty
    assert len(plan_compaction(hub, {"tag:topic/chat": 499}, NOW, POLICY).clusters) == 1
    busy = [replace(c, included_count_decay=50.0, last_accessed_ms=NOW) for c in hub]
    assert plan_compaction(busy, {}, NOW, POLICY).empty


def test_size_token_and_budget_caps() -> None:
    many = [cand(n, "err:oom") for n in range(25)]
    plan = plan_compaction(many, {}, NOW, POLICY)
    assert [len(c.source_ids) for c in plan.clusters] == [10, 10, 5]
    assert len({s for c in plan.clusters for s in c.source_ids}) == 25
    capped = plan_compaction(many, {}, NOW, POLICY, CompactionBudget(max_clusters=1))
    assert [len(c.source_ids) for c in capped.clusters] == [10]
    by_sources = plan_compaction(many, {}, NOW, POLICY, CompactionBudget(max_sources=13))
    assert [len(c.source_ids) for c in by_sources.clusters] == [10, 3]
    tight = replace(POLICY, max_cluster_tokens=30)  # each text is ~9 tokens
    assert all(c.token_estimate <= 30 for c in plan_compaction(many, {}, NOW, tight).clusters)
    assert plan_compaction(many, {}, NOW, replace(POLICY, max_cluster_tokens=12)).empty


def test_plan_is_deterministic_and_ids_depend_on_sources_only() -> None:
    members = [cand(n, "err:oom", "path:/var/log/syslog") for n in range(6)]
    shuffled = members[:]
    random.Random(7).shuffle(shuffled)
    first = plan_compaction(members, {"err:oom": 3}, NOW, POLICY)
    again = plan_compaction(shuffled, {"err:oom": 3}, NOW, POLICY)
    assert first == again
    later = plan_compaction(members, {"err:oom": 3}, NOW + DAY_MS, POLICY)
    assert later.clusters[0].summary_id == first.clusters[0].summary_id
    assert later.plan_id == first.plan_id
    (cluster,) = first.clusters
    assert cluster.summary_id == summary_id(reversed(cluster.source_ids), cluster.ts_ms)
    assert cluster.summary_id != summary_id(cluster.source_ids[1:], cluster.ts_ms)
    assert cluster.ts_ms == max(m.ts_ms for m in members)
    assert decode_plan(encode_plan(first)) == first


def test_rolled_up_keys_score_frequency_type_and_rarity() -> None:
    sources = [
        SummarySource("a", "x", 1, ("err:oom", "entity:bob", "tag:topic/db")),
        SummarySource("b", "x", 2, ("err:oom", "entity:bob", "chan:ops")),
        SummarySource("c", "x", 3, ("err:oom", "chan:ops")),
    ]
    keys = rolled_up_keys(sources, {}, centre="tag:topic/db", limit=2)
    assert keys == ("err:oom", "tag:topic/db")  # centre kept, then heaviest
    # A very common key loses to a rarer one of lighter type.
    common = rolled_up_keys(sources, {"err:oom": 10**6}, centre="chan:ops", limit=2)
    assert common == ("chan:ops", "entity:bob")
    wide = [SummarySource(str(i), "x", i, (f"entity:e{i}",)) for i in range(40)]
    assert len(rolled_up_keys(wide, {}, centre="entity:e0", limit=32)) == 32


def test_rolled_up_tags_keep_gc_ops_and_err_tags() -> None:
    sources = [
        SummarySource("a", "x", 1, tags=("ops/disk", "topic/db", "misc")),
        SummarySource("b", "x", 2, tags=("err/timeout", "topic/db")),
    ]
    tags = rolled_up_tags(sources, limit=5)
    assert tags == ("err/timeout", "ops/disk", "src/system", "topic/db", "topic/gc")


def test_summary_text_is_extractive_deduplicated_and_capped() -> None:
    sources = [
        SummarySource("b", "Disk full on node seven", 2),
        SummarySource("a", "disk  full on node seven", 1),
        SummarySource("c", "Rotated the logs on node seven", 3),
    ]
    text = summary_text(sources, centre="err:disk", bucket_start_ms=T0, max_tokens=100)
    assert text.splitlines() == [
        "Summary of 3 memories on err:disk from 2026-09-21:",
        "- disk full on node seven",
        "- Rotated the logs on node seven",
    ]
    short = summary_text(sources, centre="err:disk", bucket_start_ms=T0, max_tokens=16)
    assert short.splitlines()[-1] == "- … and 1 more"


def test_higher_level_summaries_record_summary_of() -> None:
    summaries = [cand(n, "err:oom", kind="summary", summary_level=1) for n in range(3)]
    assert plan_compaction(summaries, {}, NOW, POLICY).empty
    plan = plan_compaction(summaries, {}, NOW, replace(POLICY, summary_level=1))
    (cluster,) = plan.clusters
    assert cluster.summary_of == cluster.source_ids == ("m000", "m001", "m002")
    assert cluster.summary_level == 2


def test_pressure_signals_pause() -> None:
    assert paused(["tag:ops/outbox-critical"])
    assert paused(["ops/pressure-discord-flood", "topic/x"])
    assert not paused(["ops/embed-queue-high"])
