"""`python -m bench fold` counts the commands inside a packed Redis request by
walking RESP, so a value's bytes never pass for a command."""

from __future__ import annotations

from bench.fold import _resp_commands


def test_commands_are_counted_by_their_lengths_not_by_their_bytes() -> None:
    get = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n"
    # A binary value that holds what looks like the start of another command.
    tricky = b"\r\n*2\r\n$3\r\n"
    hset = b"*4\r\n$4\r\nHSET\r\n$1\r\nh\r\n$1\r\nv\r\n$%d\r\n%s\r\n" % (len(tricky), tricky)
    assert _resp_commands(get) == 1
    assert _resp_commands(get + hset + get) == 3


def test_an_empty_request_holds_no_command() -> None:
    assert _resp_commands(b"") == 0
