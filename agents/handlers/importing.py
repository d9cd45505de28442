"""Applying an `import` command: one chunk of an export, at its place in the journal.

The chunk's lines are written verbatim through `tables/memory/imported.py` (one
transaction with the chunk's mark, so a chunk read again changes nothing). A memory
that comes without its vectors (an export made with `--no-vectors`, or one whose
embedding space differs from this deployment's) is embedded here with the worker's
embedder: its canonical vector from its text, exactly what the write path stores
for the same text; its eidolon vector is the canonical one, since the field state
it was formed in is not in the file (docs/export-format.md says so). What was
written is returned for the witness: the memory ids and a digest of the lines.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from grimoire.agents.ports import Embedder
from grimoire.streams.exchange.chunks import ImportChunk
from grimoire.streams.exchange.format import StateLine, encode_line, hash_line, hash_of
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash.writing import lexical_form_of
from grimoire.tables.memory.imported import VECTOR_FIELDS, ImportWriter

__all__ = ["IMPORT_OP", "ImportHandler"]

logger = logging.getLogger(__name__)

IMPORT_OP: Final = "import"


@dataclass
class ImportHandler:
    writer: ImportWriter
    embedder: Embedder

    async def apply_chunk(
        self, agent_id: str, chunk: ImportChunk
    ) -> tuple[str, Sequence[str], dict[str, Any]]:
        """Write the chunk (once); the witness summary (op, ids, fields)."""
        summary: dict[str, Any] = {
            "import": chunk.import_id,
            "chunk": chunk.index,
            "of": chunk.total,
            "successor_of": chunk.successor_of,
        }
        if await self.writer.applied(agent_id, chunk.chunk_id):
            return IMPORT_OP, (), {**summary, "changed": False}
        lines = await self._with_vectors(_with_lexical_forms(chunk.lines))
        written = await self.writer.write(
            agent_id, chunk.chunk_id, lines, derive=chunk.successor_of is not None
        )
        hasher = hashlib.sha256()
        for line in lines:
            hasher.update(encode_line(line))
        return (
            IMPORT_OP,
            written,
            {**summary, "changed": True, "lines": len(lines), "sha256": hasher.hexdigest()},
        )

    async def _with_vectors(self, lines: Sequence[StateLine]) -> list[StateLine]:
        bare = [
            i
            for i, line in enumerate(lines)
            if line.type == "memory" and not set(hash_of(line)) & set(VECTOR_FIELDS)
        ]
        if not bare:
            return list(lines)
        texts = [text_of(hash_of(lines[i]).get(b"text", b"")) for i in bare]
        vectors = await self.embedder.embed(texts)
        out = list(lines)
        for i, vector in zip(bare, vectors, strict=True):
            raw = np.asarray(vector, dtype=np.float32).tobytes()
            fields = hash_of(out[i])
            fields[b"canonical"] = raw
            fields[b"eidolon"] = raw
            out[i] = hash_line(out[i], fields)
        logger.info("import: embedded %d memories that came without vectors", len(bare))
        return out


def _with_lexical_forms(lines: Sequence[StateLine]) -> list[StateLine]:
    """Memory lines of an export written before the lexical form (store format 2)
    get it here, so the full-text index finds them; their agent's term counts are
    the export's until `grimoire reindex` recounts them (docs/export-format.md)."""
    out = list(lines)
    for i, line in enumerate(out):
        if line.type != "memory":
            continue
        fields = hash_of(line)
        if not fields or b"lexical" in fields:
            continue
        form = lexical_form_of(fields.get(b"text"), fields.get(b"ts"))
        fields[b"lexical"] = form.text.encode()
        out[i] = hash_line(line, fields)
    return out
