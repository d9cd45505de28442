"""Storage of what the agent learned from outcomes: run recalls, learned weights,
the causal graph."""

from grimoire.tables.learn.store import LearningStore, LearningWrite, RedisLearningStore

__all__ = ["LearningStore", "LearningWrite", "RedisLearningStore"]
