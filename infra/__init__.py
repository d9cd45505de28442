"""grimoire.infra"""
