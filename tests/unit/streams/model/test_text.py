"""grimoire.streams.model.text: normalization, hashing, search terms, control characters."""

from __future__ import annotations

import hashlib

import pytest

from grimoire.streams.model.text import (
    has_control_characters,
    normalize_text,
    normalized_hash,
    search_terms,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  a\t b\n\nc  ", "a b c"),
        ("a\r\nb", "a b"),
        ("no change", "no change"),
        ("", ""),
        ("   ", ""),
        ("a\u00a0b", "a b"),  # NBSP is whitespace after NFKC
        ("\ufb01le", "file"),  # "fi" ligature -> two letters
        ("\uff21\uff22\uff23", "ABC"),  # full-width Latin
        ("Case Kept", "Case Kept"),
    ],
)
def test_normalize_text(raw: str, expected: str) -> None:
    assert normalize_text(raw) == expected


def test_normalized_hash_folds_case_and_whitespace() -> None:
    expected = hashlib.sha256(b"disk full on node 7").hexdigest()[:32]
    for variant in ("disk full on node 7", "Disk Full on NODE 7", "  disk\tfull\n on  node 7 "):
        assert normalized_hash(variant) == expected


def test_normalized_hash_differs_for_different_text() -> None:
    assert normalized_hash("disk full") != normalized_hash("disk empty")
    assert normalized_hash("diskfull") != normalized_hash("disk full")


def test_normalized_hash_shape() -> None:
    value = normalized_hash("x")
    assert len(value) == 32
    int(value, 16)


def test_search_terms_drops_stopwords_and_single_characters() -> None:
    # the/is/on/and/a are stopwords; "7", "b", "c" are one character long.
    assert search_terms("The disk is full on node-7 and a b c") == ("disk", "full", "node")


def test_search_terms_lowercases_and_dedupes_in_first_seen_order() -> None:
    assert search_terms("Disk full, DISK again; full disk") == ("disk", "full", "again")


def test_search_terms_keeps_dotted_and_apostrophe_words() -> None:
    assert search_terms("open config.yaml, don't panic") == (
        "open",
        "config.yaml",
        "don't",
        "panic",
    )


def test_search_terms_only_stopwords() -> None:
    assert search_terms("what is it to you") == ()
    assert search_terms("") == ()


def test_search_terms_respects_limit() -> None:
    assert search_terms("alpha beta gamma delta", limit=2) == ("alpha", "beta")
    assert search_terms("alpha alpha beta gamma", limit=2) == ("alpha", "beta")
    words = " ".join(f"w{i:02d}" for i in range(40))
    assert len(search_terms(words)) == 32
    assert search_terms(words)[-1] == "w31"


@pytest.mark.parametrize("text", ["plain", "a\nb", "a\tb", "a\r\nb", "", "ünïcödé ✓"])
def test_allowed_characters(text: str) -> None:
    assert not has_control_characters(text)


@pytest.mark.parametrize(
    "char", ["\x00", "\x07", "\x08", "\x0b", "\x0c", "\x0e", "\x1b", "\x1f", "\x7f"]
)
def test_control_characters(char: str) -> None:
    assert has_control_characters(f"ok{char}ok")
