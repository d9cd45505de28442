"""grimoire.tables.testing"""
