"""grimoire.tables.trust"""
