"""grimoire.streams.trust"""
