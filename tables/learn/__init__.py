"""Storage of what the agent learned from outcomes: run recalls, learned weights,
the causal graph."""

from grimoire.tables.learn.store import LearningWrite, RedisLearningStore

__all__ = ["LearningWrite", "RedisLearningStore"]
