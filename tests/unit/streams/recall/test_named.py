"""grimoire.streams.recall.named: the words of a query, whether it names a memory's
actor, and the query without the actors it names."""

from __future__ import annotations

from grimoire.streams.recall.named import (
    MAX_ACTOR_WORDS,
    actor_candidates,
    actor_name,
    names_actor,
    query_names,
    without_actors,
)


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


def test_an_actor_is_named_by_its_casefolded_words() -> None:
    assert actor_name("John") == "john"
    assert actor_name("deploy-bot") == "deploy bot"
    assert actor_name("  Dana  O'Neil ") == "dana o neil"
    assert actor_name("") == ""
    assert actor_name("--") == ""


def test_candidates_are_the_runs_of_up_to_three_words() -> None:
    found = actor_candidates("Did Dana O'Neil call?")
    assert found == tuple(sorted(found))
    assert {"did", "dana", "dana o", "dana o neil", "o neil call"} <= set(found)
    assert "did dana o neil" not in found  # four words
    assert all(len(c.split()) <= MAX_ACTOR_WORDS for c in found)
    assert actor_candidates("") == ()


def test_a_long_query_offers_its_first_words_only() -> None:
    found = actor_candidates(" ".join(f"w{i}" for i in range(500)))
    assert "w63" in found
    assert "w64" not in found


def test_the_named_actor_and_its_possessive_leave_the_query() -> None:
    actors = {"john", "caroline"}
    assert without_actors("What martial arts has John done?", actors) == (
        "What martial arts has done?"
    )
    assert without_actors("What is Caroline's identity?", actors) == "What is identity?"
    assert without_actors("What is Caroline\u2019s identity?", actors) == "What is identity?"


def test_a_several_word_actor_leaves_whole_and_only_whole() -> None:
    actors = {"deploy bot", "dana o neil"}
    assert without_actors("What did the deploy-bot roll back?", actors) == (
        "What did the roll back?"
    )
    assert without_actors("Did Dana O'Neil approve it?", actors) == "Did approve it?"
    # "deploy" alone is not the actor "deploy bot".
    assert without_actors("When did we deploy?", actors) == "When did we deploy?"


def test_a_word_inside_another_is_not_a_name() -> None:
    assert without_actors("Did Johnny call?", {"john"}) == "Did Johnny call?"
    # The "s" that is not a possessive stays.
    assert without_actors("John s thing", {"john"}) == "s thing"


def test_without_named_actors_the_query_is_itself() -> None:
    assert without_actors("What did Maria paint?", set()) == "What did Maria paint?"
    assert without_actors("What did Maria paint?", {"john"}) == "What did Maria paint?"


def test_a_query_of_names_alone_is_kept_whole() -> None:
    # Nothing but the name would be left: the vector lanes get the query as it is.
    assert without_actors("John?", {"john"}) == "John?"
    assert without_actors("John and Maria", {"john", "maria"}) == "and"
    assert without_actors("John Maria", {"john", "maria"}) == "John Maria"
