"""grimoire.agents"""
