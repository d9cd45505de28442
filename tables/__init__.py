"""grimoire.tables"""
