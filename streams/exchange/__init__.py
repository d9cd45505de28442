"""grimoire.streams.exchange: the export file's format (JSON Lines, versioned), its
validation, import chunks, and the successor transformation. Pure: no stores, no
clock; see docs/export-format.md."""
