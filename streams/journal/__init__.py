"""grimoire.streams.journal: the per-agent journal's entries and the fold's ordering rules."""
