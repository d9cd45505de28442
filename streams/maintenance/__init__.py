"""grimoire.streams.maintenance"""
