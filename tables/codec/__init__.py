"""grimoire.tables.codec"""
