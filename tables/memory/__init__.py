"""grimoire.tables.memory"""
