"""grimoire.tables.maintenance"""
