"""grimoire.agents.journal"""
