"""Clades in Redis: the membership registry and what each agent published."""
