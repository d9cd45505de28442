"""grimoire.streams.recall"""
