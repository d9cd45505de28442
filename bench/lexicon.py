"""`python -m bench lexicon`: what the lexical form's two parts are worth to plain
BM25 on LoCoMo, each on and off, over the same turns.

The lexical form (grimoire.streams.model.lexicon) is part of the stored record, so
the pipeline bench cannot switch it off; this runs the bench's BM25 baseline (k1
1.2, b 0.75) over each turn's words as the form makes them, with stems and with
the event time in words each on or off, and scores turn-level R@5 per category as
`bench locomo` does. No model, broker or Redis: seconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.locomo_data import Conversation, load_conversations
from grimoire.streams.model import lexicon

TOP_K = 5
CATEGORIES = (1, 2, 3, 4)


def _words(text: str, ts_ms: int | None, *, stems: bool) -> list[str]:
    form = lexicon.lexical_form(text, ts_ms) if stems else None
    if form is not None:
        return list(form.words)
    words = lexicon.unstemmed_words(text)
    if ts_ms is not None:
        words.extend(lexicon.time_words(ts_ms))
    return words


def _recall_at_5(
    conversation: Conversation, *, stems: bool, time_words: bool
) -> dict[int, list[float]]:
    docs: list[Counter[str]] = []
    ids: list[str] = []
    for session in conversation.sessions:
        for index, turn in enumerate(session.turns):
            ts = session.date_ms + index * 1_000 if time_words else None
            docs.append(Counter(_words(turn.unit_text(), ts, stems=stems)))
            ids.append(turn.dia_id)
    lengths = [sum(doc.values()) for doc in docs]
    average = sum(lengths) / len(lengths)
    held: Counter[str] = Counter()
    for doc in docs:
        held.update(doc.keys())
    n = len(docs)
    idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in held.items()}
    out: dict[int, list[float]] = {}
    for question in conversation.questions:
        if not question.evidence or question.category not in CATEGORIES:
            continue
        terms = (
            lexicon.query_terms(question.text)
            if stems
            else tuple(dict.fromkeys(lexicon.unstemmed_words(question.text)))
        )
        scores = []
        for doc, length in zip(docs, lengths, strict=True):
            norm = 1.2 * (1 - 0.75 + 0.75 * length / average)
            scores.append(sum(idf[t] * doc[t] * 2.2 / (doc[t] + norm) for t in terms if doc.get(t)))
        top = {ids[i] for i in sorted(range(n), key=lambda i: (-scores[i], i))[:TOP_K]}
        evidence = set(question.evidence)
        out.setdefault(question.category, []).append(len(top & evidence) / len(evidence))
    return out


def run_lexicon_bench(data_path: Path, conversation_ids: Sequence[str] = ()) -> dict[str, Any]:
    conversations = load_conversations(orjson.loads(data_path.read_bytes()))
    if conversation_ids:
        conversations = [c for c in conversations if c.sample_id in set(conversation_ids)]
    result: dict[str, Any] = {}
    for stems in (True, False):
        for time_words in (True, False):
            by_category: dict[int, list[float]] = {}
            for conversation in conversations:
                for category, hits in _recall_at_5(
                    conversation, stems=stems, time_words=time_words
                ).items():
                    by_category.setdefault(category, []).extend(hits)
            every = [hit for hits in by_category.values() for hit in hits]
            name = f"stems_{'on' if stems else 'off'}_time_words_{'on' if time_words else 'off'}"
            result[name] = {
                "R@5": round(sum(every) / len(every), 4),
                **{
                    str(category): round(sum(hits) / len(hits), 4)
                    for category, hits in sorted(by_category.items())
                },
                "n": len(every),
            }
    return {"bm25_r_at_5_by_lexical_form": result, "data": str(data_path)}
