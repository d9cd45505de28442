"""grimoire.tables.config"""
