"""grimoire.topics"""
