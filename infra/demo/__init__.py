"""grimoire.infra.demo"""
