"""Storage errors."""

from grimoire.streams.exceptions import GrimoireError


class StorageError(GrimoireError):
    """Root of the storage layer's errors."""


class SchemaMismatch(StorageError):
    """An index with our name exists but was created from a different schema."""


class VectorSpaceMismatch(StorageError):
    """The prefix holds vectors from another model or precision than this worker's."""
