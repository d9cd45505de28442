"""`python -m bench locomo` (with the folds,
bootstrap and ablation knobs of `bench.locomo_options`): LoCoMo conversations
through the real pipeline, every question as a recall request through Kafka,
turn-level evidence retrieval scored as LoCoMo scores it, with BM25 and dense
baselines over the same turns; per category, on all conversations and on the
report folds, with bootstrap intervals (`bench.locomo_stats`).

Ingest uses only the conversation: each session is one hyperedge (its
`turn_id`), its date is the event time, the speaker is the actor and an entity.
Questions, answers and evidence are read after ingest, for asking and scoring.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from redis.asyncio import Redis

from bench.bm25 import BM25
from bench.locomo_data import Conversation, load_conversations
from bench.locomo_options import (
    LocomoOptions,
    ablated_settings,
    ablation_changes,
)
from bench.locomo_stats import measure, pick, split_folds, summary_lines
from bench.retrieval_metrics import Judged, score
from bench.services import bench_ports, on_services, ready_client, state_root
from grimoire.infra.embedding.embedder import SentenceTransformerEmbedder
from grimoire.infra.local.services import LocalServices
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.tables.memory.agent_state import AgentStateStore
from grimoire.topics.client import GrimoireClient
from grimoire.topics.options import RecallBudgets
from grimoire.topics.schemas import TranscriptV1

logger = logging.getLogger(__name__)

TOP_K = 10
IN_FLIGHT = 8
# The questions are read-only probes of one final state, asked concurrently:
# counting them as uses would make each answer depend on the order of the others.
RECALL_BUDGETS = RecallBudgets(max_items=TOP_K, token_budget=100_000, full_text_items=0)


def default_data_path() -> Path:
    return Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo-dev.json"


def _agent(conversation: Conversation) -> str:
    return f"locomo-{conversation.sample_id}"


def _lines(conversation: Conversation) -> list[TranscriptV1]:
    lines = []
    for session in conversation.sessions:
        edge = f"{conversation.sample_id}-session-{session.number}"
        for index, turn in enumerate(session.turns):
            lines.append(
                TranscriptV1(
                    agent_id=_agent(conversation),
                    # A second per turn keeps the order inside a session.
                    ts=session.date_ms + index * 1_000,
                    line={"role": "user", "content": turn.unit_text()},
                    event_id=f"{conversation.sample_id}:{turn.dia_id}",
                    session_id=edge,
                    turn_id=edge,
                    actor_id=turn.speaker or None,
                    entities=[turn.speaker] if turn.speaker else None,
                )
            )
    return lines


async def _ingest(
    client: GrimoireClient, state: AgentStateStore, conversations: list[Conversation]
) -> dict[str, float]:
    expected = {}
    for conversation in conversations:
        lines = _lines(conversation)
        expected[_agent(conversation)] = len(lines)
        for line in lines:
            await client.publish_raw(
                client.topics.transcripts, line.agent_id, line.dumps_json(), wait=False
            )
    await client.flush()
    while True:
        stats = {agent: await state.stats(agent) for agent in expected}
        if all(stats[a].get("candidates", 0.0) >= n for a, n in expected.items()):
            break
        await asyncio.sleep(0.2)
    totals: dict[str, float] = {}
    for counters in stats.values():
        for name, value in counters.items():
            totals[name] = totals.get(name, 0.0) + value
    return totals


async def _ask_all(
    client: GrimoireClient, conversations: list[Conversation]
) -> tuple[dict[tuple[str, int], list[str]], list[float]]:
    gate = asyncio.Semaphore(IN_FLIGHT)
    ranked: dict[tuple[str, int], list[str]] = {}
    latencies: list[float] = []

    async def ask(conversation: Conversation, index: int) -> None:
        question = conversation.questions[index]
        async with gate:
            started = time.perf_counter()
            answer = await client.recall(
                _agent(conversation),
                question.text,
                budgets=RECALL_BUDGETS,
                record_usage=False,
                timeout=60.0,
            )
            latencies.append((time.perf_counter() - started) * 1000)
        prefix = f"{conversation.sample_id}:"
        ranked[(conversation.sample_id, index)] = [
            item.source_event_id.removeprefix(prefix)
            for item in answer.items
            if item.source_event_id.startswith(prefix)
        ]

    await asyncio.gather(
        *(
            ask(conversation, index)
            for conversation in conversations
            for index, question in enumerate(conversation.questions)
            if question.evidence
        )
    )
    return ranked, latencies


def _baselines(
    conversations: list[Conversation], embedder: SentenceTransformerEmbedder
) -> tuple[dict[str, list[Judged]], dict[str, list[Judged]]]:
    """Each conversation's questions as BM25 and as the dense baseline rank them."""
    lexical: dict[str, list[Judged]] = {}
    dense: dict[str, list[Judged]] = {}

    async def vectors(texts: list[str]) -> np.ndarray[Any, Any]:
        rows = [await embedder.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)]
        return np.vstack(rows) if rows else np.zeros((0, embedder.dims), dtype=np.float32)

    for conversation in conversations:
        turns = conversation.turns()
        units = [turn.unit_text() for turn in turns]
        ids = [turn.dia_id for turn in turns]
        questions = [q for q in conversation.questions if q.evidence]
        bm25 = BM25(units)
        unit_vectors = asyncio.run(vectors(units))
        question_vectors = asyncio.run(vectors([q.text for q in questions]))
        lexical_here = lexical.setdefault(conversation.sample_id, [])
        dense_here = dense.setdefault(conversation.sample_id, [])
        for question, vector in zip(questions, question_vectors, strict=True):
            top = bm25.rank(question.text, TOP_K)
            lexical_here.append(
                Judged(question.category, tuple(ids[i] for i in top), question.evidence)
            )
            order = np.argsort(-(unit_vectors @ vector), kind="stable")[:TOP_K]
            dense_here.append(
                Judged(question.category, tuple(ids[i] for i in order), question.evidence)
            )
    return lexical, dense


def run_locomo_bench(
    settings: Settings,
    *,
    data_path: Path,
    conversation_ids: tuple[str, ...] = (),
    options: LocomoOptions | None = None,
) -> dict[str, Any]:
    """The result as one JSON-ready dict; the human-readable table (per category, all
    conversations and the report fold, the intervals) is written to stdout first."""
    options = options or LocomoOptions()
    everything = load_conversations(orjson.loads(data_path.read_bytes()))
    # Folds over the whole file: a subset run keeps every conversation's fold.
    folds = split_folds((c.sample_id for c in everything), options.folds, options.report_fold)
    conversations = everything
    if conversation_ids:
        conversations = [c for c in everything if c.sample_id in set(conversation_ids)]
        if not conversations:
            raise ValueError(f"none of {conversation_ids} is in {data_path}")
    state_dir = state_root() / "bench-locomo"
    services = LocalServices(state_dir, bench_ports(19792, 17079))
    started_services = services.up()
    prefix = f"locomo{uuid.uuid4().hex[:6]}"
    run_settings = on_services(
        ablated_settings(settings, options.ablate),
        services,
        topic_prefix=prefix,
        # The conversations span months of event time but are ingested in a
        # minute: maintenance would compact whole sessions into summaries and
        # add curator insights before the first question, and the benchmark
        # scores retrieval of the turns themselves.
        maintenance_enabled=False,
    )
    worker = start_worker(run_settings, state_dir / "log" / f"worker-{prefix}.log")
    try:
        report = asyncio.run(_pipeline(run_settings, conversations))
    finally:
        stop_worker(worker)
        if started_services:
            services.down()
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    try:
        lexical, dense = _baselines(conversations, embedder)
    finally:
        embedder.close()
    ranked: dict[tuple[str, int], list[str]] = report.pop("ranked")
    judged = {
        c.sample_id: [
            Judged(q.category, tuple(ranked[(c.sample_id, i)]), q.evidence)
            for i, q in enumerate(c.questions)
            if q.evidence
        ]
        for c in conversations
    }
    skipped = sum(1 for c in conversations for q in c.questions if not q.evidence)
    run_ids = [c.sample_id for c in conversations]
    result = {
        "grimoire": score(pick(judged, run_ids)),
        "baselines": {"bm25": score(pick(lexical, run_ids)), "dense": score(pick(dense, run_ids))},
        "questions": sum(len(js) for js in judged.values()),
        "skipped_questions": skipped,
        "conversations": run_ids,
        **report,
        "data": str(data_path),
        **measure(
            judged,
            {"bm25": lexical, "dense": dense},
            folds,
            resamples=options.resamples,
            seed=options.seed,
        ),
        "ablated": ablation_changes(options.ablate),
    }
    sys.stdout.write("\n".join(summary_lines(result)) + "\n")
    sys.stdout.flush()
    return result


async def _pipeline(settings: Settings, conversations: list[Conversation]) -> dict[str, Any]:
    redis = Redis.from_url(settings.redis.url)
    try:
        async with ready_client(settings, timeout=180) as client:
            state = AgentStateStore(redis, settings.broker.topic_prefix)
            started = time.perf_counter()
            totals = await _ingest(client, state, conversations)
            ingest_s = time.perf_counter() - started
            ranked, latencies = await _ask_all(client, conversations)
    finally:
        await redis.aclose()
    turns = sum(len(c.turns()) for c in conversations)
    stored = totals.get("admit", 0.0) + totals.get("quarantine", 0.0)
    return {
        "ranked": ranked,
        "turns": turns,
        "stored_turns": int(stored),
        "decisions": {k: int(v) for k, v in sorted(totals.items()) if k != "quality_sum"},
        "ingest_s": round(ingest_s, 1),
        "recall_ms": {
            "p50": round(float(np.percentile(latencies, 50)), 1),
            "p99": round(float(np.percentile(latencies, 99)), 1),
        },
    }
