"""grimoire.infra.local"""
