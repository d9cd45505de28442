"""grimoire.streams.learn.curator"""
