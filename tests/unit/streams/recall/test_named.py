"""grimoire.streams.recall.named: the words of a query, and whether it names a memory's
actor."""

from __future__ import annotations

from grimoire.streams.recall.named import names_actor, query_names


def test_query_names_are_its_casefolded_words() -> None:
    assert query_names("What did MARIA paint?") == {"what", "did", "maria", "paint"}
    assert query_names("STRASSE Straße") == {"strasse"}
    assert query_names("") == frozenset()
    assert query_names("?! ...") == frozenset()


def test_a_possessive_is_split_off_the_name() -> None:
    named = query_names("What is Maria's favourite colour?")
    assert "maria" in named
    assert "s" in named
    assert "maria's" not in named


def test_an_actor_is_named_when_the_query_holds_its_word() -> None:
    assert names_actor(query_names("What martial arts has John done?"), "john")
    assert names_actor(query_names("What is Maria's favourite colour?"), "maria")
    assert not names_actor(query_names("What did Maria ask John?"), "melanie")


def test_every_word_of_the_actor_must_be_in_the_query() -> None:
    assert names_actor(query_names("What did the deploy bot do?"), "deploy-bot")
    assert names_actor(query_names("what did deploy-bot do"), "deploy-bot")
    assert not names_actor(query_names("What did the deploy do?"), "deploy-bot")
    assert not names_actor(query_names("Which bot ran?"), "deploy-bot")
    assert names_actor(query_names("user 42's request"), "user:42")


def test_a_word_inside_another_word_does_not_name_the_actor() -> None:
    assert not names_actor(query_names("What did Johnny say?"), "john")
    assert not names_actor(query_names("Ask the robots"), "bot")


def test_the_match_ignores_case() -> None:
    assert names_actor(query_names("what did maria paint"), "Maria")
    assert names_actor(query_names("WHAT DID MARIA PAINT"), "maria")
    assert names_actor(query_names("what did the Deploy Bot do"), "DEPLOY-bot")


def test_no_actor_or_no_query_names_nobody() -> None:
    assert not names_actor(query_names("What did Maria paint?"), "")
    assert not names_actor(frozenset(), "maria")
    assert not names_actor(query_names(""), "maria")
    # an actor id without a word in it
    assert not names_actor(query_names("what did --- do"), "---")
