"""grimoire.streams.inbound"""
