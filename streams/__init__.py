"""grimoire.streams"""
