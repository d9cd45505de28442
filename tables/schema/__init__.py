"""grimoire.tables.schema"""
