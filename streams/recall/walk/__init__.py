"""grimoire.streams.recall.walk"""
