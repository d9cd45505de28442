"""grimoire.infra.bench"""
