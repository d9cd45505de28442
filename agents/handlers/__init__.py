"""grimoire.agents.handlers"""
