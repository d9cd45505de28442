"""Grimoire: streaming long-term memory for autonomous agents."""

__version__ = "0.1.0"
