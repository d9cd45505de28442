"""grimoire.infra.embedding"""
