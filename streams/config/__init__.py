"""grimoire.streams.config: an agent's runtime configuration, as the journal sets it."""
