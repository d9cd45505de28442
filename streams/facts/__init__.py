"""grimoire.streams.facts: bi-temporal facts (SPEC §7), their timeline and queries."""
