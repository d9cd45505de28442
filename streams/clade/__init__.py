"""Clades (docs/clades.md): named sets of sibling agents that share what they learn."""
