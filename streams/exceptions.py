"""Errors raised by the pure core."""


class GrimoireError(Exception):
    """Root of every error Grimoire raises on purpose."""


class StreamsError(GrimoireError):
    """Root of the pure core's errors."""


class InvalidEvent(StreamsError):
    """An input event failed validation; carries a machine-readable reason."""

    def __init__(self, reason: str, detail: str, field: str | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.field = field
