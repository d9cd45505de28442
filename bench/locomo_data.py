"""LoCoMo conversations (any file in the LoCoMo format) as plain values.

Only what a benchmark needs: the turns, as the memory units Grimoire ingests,
and the questions with their evidence turn ids and categories. Nothing here
reads the answers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_EVIDENCE = re.compile(r"D\d+:\d+")
_SESSION = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    caption: str = ""

    def unit_text(self) -> str:
        """The memory unit: who said it, what was said, and what was shown.
        A transcript of several people names its speakers; so does this."""
        shown = f" [shares a photo: {self.caption}]" if self.caption else ""
        return f"{self.speaker}: {self.text}{shown}"


@dataclass(frozen=True, slots=True)
class Session:
    number: int
    date_ms: int
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True, slots=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    def turns(self) -> list[Turn]:
        return [turn for session in self.sessions for turn in session.turns]


def parse_session_date(value: str) -> int:
    """'1:56 pm on 8 May, 2023' → epoch ms (UTC; the data carries no zone)."""
    cleaned = " ".join(value.replace(",", ", ").split()).replace(" ,", ",")
    parsed = datetime.strptime(cleaned, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def parse_evidence(raw: Sequence[Any]) -> tuple[str, ...]:
    """Evidence ids in order, deduplicated; tolerates 'D8:6; D9:17' and stray text."""
    found: dict[str, None] = {}
    for entry in raw:
        for match in _EVIDENCE.findall(str(entry)):
            found.setdefault(match, None)
    return tuple(found)


def load_conversations(data: Any) -> list[Conversation]:
    if not isinstance(data, list):
        raise ValueError("a LoCoMo file holds a JSON list of conversations")
    return [_conversation(item) for item in data]


def _conversation(item: Mapping[str, Any]) -> Conversation:
    body = item["conversation"]
    numbers = sorted(
        int(m.group(1)) for key in body if (m := _SESSION.match(key)) and body.get(key)
    )
    sessions = tuple(
        Session(
            number=n,
            date_ms=parse_session_date(body[f"session_{n}_date_time"]),
            turns=tuple(_turn(t) for t in body[f"session_{n}"]),
        )
        for n in numbers
    )
    speakers = tuple(body[k] for k in ("speaker_a", "speaker_b") if body.get(k))
    questions = tuple(
        Question(str(qa["question"]), parse_evidence(qa.get("evidence") or ()), int(qa["category"]))
        for qa in item.get("qa", ())
    )
    return Conversation(str(item["sample_id"]), speakers, sessions, questions)


def _turn(raw: Mapping[str, Any]) -> Turn:
    return Turn(
        dia_id=str(raw["dia_id"]),
        speaker=str(raw.get("speaker", "")),
        text=str(raw.get("text", "")),
        caption=str(raw.get("blip_caption") or ""),
    )
