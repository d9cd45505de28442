"""grimoire.agents.maintenance"""
