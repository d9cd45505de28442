"""The memory hash (`Keyspace.memory`): the one stored shape every memory has, and
the only package that writes or reads its fields.

A memory is written whole by `hash_fields` (observed events), and through it for
what maintenance creates (`curated_fields` for distilled entries, `summary_fields`
for compaction summaries). Readers decode only the fields their view needs, each
from one HMGET row or search document, by position where a request reads hundreds
(recall records, walk nodes), so a field's name, default and parse are written once
here: recall and the decay pass read confidence, strength and the last access the
same way, which the decay snapshot relies on.

One module per view: `writing` (with pins and retraction), `recall` (records and
walk nodes), `decay`, `curator`, `compaction`, `derivation`.
"""

from grimoire.tables.codec.memory_hash.compaction import (
    CANDIDATE_FIELDS,
    candidate_of,
    rebuilt_summary_fields,
    summary_fields,
    summary_record,
)
from grimoire.tables.codec.memory_hash.curator import (
    CURATOR_EVENT_TYPE,
    ENTRY_FIELDS,
    EPISODE_FIELDS,
    EVIDENCE_FIELDS,
    QUARANTINE_FIELDS,
    changed_curated_fields,
    curated_entry,
    curated_fields,
    episode_view,
    evidence_row,
    quarantined_view,
)
from grimoire.tables.codec.memory_hash.decay import (
    DECAY_FIELDS,
    StoredDecayState,
    decode_state,
)
from grimoire.tables.codec.memory_hash.derivation import (
    DERIVATION_FIELDS,
    derived_node,
)
from grimoire.tables.codec.memory_hash.recall import (
    NODE_FIELDS,
    RECORD_FIELDS,
    decode_node,
    decode_record,
    decode_row,
    with_usage,
)
from grimoire.tables.codec.memory_hash.writing import (
    RETRACTED_DROPPED,
    RETURN_FIELDS,
    StoredMemory,
    hash_fields,
    is_pinned,
    is_retracted,
    pinned_fields,
    retracted_fields,
    stored_memory,
)

__all__ = [
    "CANDIDATE_FIELDS",
    "CURATOR_EVENT_TYPE",
    "DECAY_FIELDS",
    "DERIVATION_FIELDS",
    "ENTRY_FIELDS",
    "EPISODE_FIELDS",
    "EVIDENCE_FIELDS",
    "NODE_FIELDS",
    "QUARANTINE_FIELDS",
    "RECORD_FIELDS",
    "RETRACTED_DROPPED",
    "RETURN_FIELDS",
    "StoredDecayState",
    "StoredMemory",
    "candidate_of",
    "changed_curated_fields",
    "curated_entry",
    "curated_fields",
    "decode_node",
    "decode_record",
    "decode_row",
    "decode_state",
    "derived_node",
    "episode_view",
    "evidence_row",
    "hash_fields",
    "is_pinned",
    "is_retracted",
    "pinned_fields",
    "quarantined_view",
    "rebuilt_summary_fields",
    "retracted_fields",
    "stored_memory",
    "summary_fields",
    "summary_record",
    "with_usage",
]
