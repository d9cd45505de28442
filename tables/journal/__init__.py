"""grimoire.tables.journal"""
