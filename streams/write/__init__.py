"""grimoire.streams.write"""
