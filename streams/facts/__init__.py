"""grimoire.streams.facts: bi-temporal facts (docs/design.md §7), their timeline and queries."""
