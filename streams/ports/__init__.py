"""The pure core's ports: every `typing.Protocol` that `grimoire.streams` declares.

The core decides and the outer layers store and send; where a decision needs
something from outside (one agent's memories to recall from, a distiller's
text), it names what it needs as a Protocol here and the outer layers supply an
implementation. Keeping them in one package, one module per concern, makes the
core's whole surface to the outside readable in one place. This package imports
nothing at import time; import the concern's module itself
(`grimoire.streams.ports.recall`, `.learn`, `.maintenance`).
"""

__all__: list[str] = []
