"""grimoire.streams.learn"""
