"""grimoire.streams.model"""
