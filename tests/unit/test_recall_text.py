"""The term analyser shared by indexing (workers) and querying (recall)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zeromem.store.text import (
    _ASCII_WORD,
    _WORD,
    INDEX_TEXT_MAX_CHARS,
    MAX_TERM_CHARS,
    SPEAKER_FIELD,
    _continued_terms,
    _normalised_terms,
    doc_length,
    index_terms,
    same_source_text,
    source_text,
    speaker_of,
    stem,
    terms,
)


def test_lowercases_and_splits_on_non_alphanumerics() -> None:
    assert terms("Invoice-API / Billing_Service!") == ["invoic", "api", "bill", "servic"]


def test_drops_stop_words() -> None:
    assert terms("What is the language of the user?") == ["languag", "user"]
    assert terms("the a an of") == []


def test_keeps_ids_and_dotted_versions_whole() -> None:
    assert terms("task t42 for u10086 on v2.1 at 10.0.0.1") == [
        "task",
        "t42",
        "u10086",
        "v2.1",
        "10.0.0.1",
    ]
    # A dot after letters is a separator, and a sentence-ending "2." is just 2.
    assert terms("see file.txt, step 2.") == ["see", "file", "txt", "step", "2"]


def test_apostrophes_do_not_split_words() -> None:
    assert terms("the user's tickets") == ["user", "ticket"]
    assert terms("user’s") == ["user"]  # typographic apostrophe


def test_full_width_text_is_normalised() -> None:
    assert terms("ＴＡＳＫ ｔ４２") == ["task", "t42"]


@pytest.mark.parametrize(
    ("words", "stemmed"),
    [
        (["answer", "answers", "answered", "answering"], "answer"),
        (["prefer", "prefers", "preferred", "preferring"], "prefer"),
        (["like", "likes", "liked", "liking"], "like"),
        (["update", "updates", "updated", "updating"], "updat"),
        (["decide", "decides", "decided", "deciding"], "decid"),
        (["arrive", "arrived", "arriving"], "arriv"),
        (["change", "changes", "changed", "changing"], "chang"),
        (["like", "likes", "liked", "liking"], "like"),
        (["run", "runs", "running"], "run"),
        (["code", "codes", "coded", "coding"], "code"),
        (["use", "uses", "used", "using"], "use"),
        (["policy", "policies"], "polici"),
        (["eat", "eats", "eating"], "eat"),
        (["class", "classes"], "class"),
        (["box", "boxes"], "box"),
        (["match", "matches"], "match"),
        (["bill", "bills", "billing"], "bill"),
    ],
)
def test_stemmer_conflates_inflections(words: list[str], stemmed: str) -> None:
    assert {stem(w) for w in words} == {stemmed}


@pytest.mark.parametrize(
    "word", ["status", "class", "string", "thing", "need", "speed", "news1", "t42s"]
)
def test_stemmer_is_conservative(word: str) -> None:
    # Words that only look inflected, and anything with a digit, are left alone.
    assert stem(word) == word


def test_stemmer_leaves_non_ascii_words_alone() -> None:
    assert stem("cafés") == "cafés"
    assert terms("Straßen") == ["straßen"]


def test_cjk_becomes_overlapping_bigrams() -> None:
    assert terms("用户喜欢中文") == ["用户", "户喜", "喜欢", "欢中", "中文"]


def test_cjk_bigrams_stop_at_punctuation_and_latin_text() -> None:
    assert terms("中文，回答") == ["中文", "回答"]
    assert terms("用中文answer问题") == ["用中", "中文", "answer", "问题"]


def test_lone_cjk_character_is_a_unigram() -> None:
    assert terms("我 like 茶") == ["我", "like", "茶"]


def test_japanese_and_korean_are_bigrammed_too() -> None:
    assert terms("テスト") == ["テス", "スト"]
    assert terms("한국어") == ["한국", "국어"]


def test_query_and_memory_share_terms_across_languages() -> None:
    memory = set(index_terms("用户偏好中文回答", None, ()))
    assert {"中文", "回答"} <= memory
    assert set(terms("中文回答")) <= memory


def test_terms_are_capped() -> None:
    (term,) = terms("x" * 500)
    assert len(term) == MAX_TERM_CHARS


def test_empty_text() -> None:
    assert terms("") == []
    assert terms("  ,;  ") == []


def test_index_terms_counts_content_and_tags_and_the_name_only_when_asked() -> None:
    tf = index_terms("Prefers answers in Chinese; answers short", "pref_lang", ["i18n"])
    assert tf == {"prefer": 1, "answer": 2, "chines": 1, "short": 1, "i18n": 1}
    assert doc_length(tf) == 6
    named = index_terms("Prefers answers", "pref_lang", (), index_name=True)
    assert named == {"prefer": 1, "answer": 1, "pref": 1, "lang": 1}


def test_numbered_key_names_are_not_indexed_by_default() -> None:
    assert index_terms("note", "s03-t017", ()) == {"note": 1}


def test_index_terms_splits_camel_case_and_separators_in_names() -> None:
    assert set(index_terms("", "prefLang", (), index_name=True)) == {"pref", "lang"}
    assert set(index_terms("", "HTTPServer.config-v2/notes@x", (), index_name=True)) == {
        "http",
        "server",
        "config",
        "v2",
        "note",
        "x",
    }


def test_source_text_is_indexed_when_it_says_more_than_the_content() -> None:
    text = "Mara: Hey! Long week. I signed up for a pottery class on Tuesdays, by the way."
    tf = index_terms("Mara: I signed up for a pottery class…", None, (), text=text)
    assert tf["potteri"] == 2 and tf["tuesday"] == 1 and tf["week"] == 1
    # the speaker is a field of its own, scored without length normalisation
    assert tf["speaker mara"] == 1 and "mara" not in tf
    assert doc_length(tf) == sum(n for t, n in tf.items() if t != "speaker mara")


def test_a_name_mentioned_is_text_a_name_speaking_is_the_speaker_field() -> None:
    tf = index_terms("Tobias: Morning Mara! How was the race?", None, ())
    assert tf["speaker tobia"] == 1 and tf["mara"] == 1 and "tobia" not in tf


def test_source_text_takes_strings_of_a_structured_value_and_is_capped() -> None:
    value = {"n": 3, "note": "moved", "items": [{"sku": "A1"}, True]}
    assert source_text(value) == "moved A1"
    assert source_text("x" * (INDEX_TEXT_MAX_CHARS + 50)) == "x" * INDEX_TEXT_MAX_CHARS
    assert source_text(42) == ""


# JSON-like values, as a command's value decodes: few distinct strings, so that equal texts
# in different shapes ("a b" against ["a", "b"]) come up.
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.sampled_from(["", "a", "b", "a b", "x" * (INDEX_TEXT_MAX_CHARS - 1)]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)


def _renumbered(value: object) -> object:
    """``value`` with every number changed and every string kept: the same source text."""
    if isinstance(value, dict):
        return {k: _renumbered(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_renumbered(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value + 1
    return value


@given(_JSON, _JSON)
def test_same_source_text_agrees_with_comparing_the_texts(a: object, b: object) -> None:
    assert same_source_text(a, b) == (source_text(a) == source_text(b))
    assert same_source_text(a, _renumbered(a))


def test_same_source_text_on_the_shapes_a_worker_sees() -> None:
    assert same_source_text({"turn": 1, "note": "moved"}, {"turn": 2, "note": "moved"})
    assert not same_source_text({"turn": 1, "note": "moved"}, {"turn": 1, "note": "kept"})
    assert same_source_text({"a": "x y"}, ["x", "y"])  # different shapes, the same text
    assert not same_source_text({"a": 1}, {"a": "1"})


def test_speaker_of_a_transcript_line() -> None:
    assert speaker_of("Anna Lee: hello") == ("Anna Lee", 10)
    assert speaker_of("no speaker here: really") == ("", 0)


def test_index_terms_keeps_each_tag_whole_as_well() -> None:
    tf = index_terms("", None, ["billing-v2", "Urgent"])
    assert tf == {"bill": 1, "v2": 1, "billing-v2": 1, "urgent": 1}  # "urgent" once, not twice


def test_index_terms_ignores_generated_names() -> None:
    assert index_terms("note", "01J9ZK3Q8X7Y6W5V4T3S2R1Q0P", ()) == {"note": 1}


@given(st.text(max_size=300))
def test_terms_are_deterministic_clean_and_bounded(text: str) -> None:
    first = terms(text)
    assert first == terms(text)
    for term in first:
        assert term
        assert len(term) <= MAX_TERM_CHARS
        assert not any(ch.isspace() for ch in term)


@given(st.text(max_size=200), st.lists(st.text(min_size=1, max_size=20), max_size=5))
def test_index_terms_length_matches_counts(content: str, tags: list[str]) -> None:
    tf = index_terms(content, None, tags)
    assert all(count > 0 for count in tf.values())
    # A speaker prefix ("Name: ...") adds one field term, which BM25 scores without length
    # normalisation: it is not part of the document length.
    fields = {term: n for term, n in tf.items() if term.startswith(SPEAKER_FIELD)}
    assert len(fields) <= 1
    assert doc_length(tf) == sum(tf.values()) - sum(fields.values())
    # Every query term of the content is findable in the index.
    assert set(terms(content)) <= set(tf)


def test_contractions_meet_the_stop_words() -> None:
    assert terms("I'm booking dinner; what's the plan? We’ve decided.") == [
        "book",
        "dinner",
        "plan",
        "decid",
    ]


_ASCII = st.text(st.characters(max_codepoint=127), max_size=200)


@given(_ASCII)
def test_ascii_terms_are_the_full_pipelines(text: str) -> None:
    # terms() skips normalisation and the CJK split for ASCII text: they change nothing.
    assert terms(text) == _normalised_terms(text)


# The word expression as first written; ``_WORD`` and ``_ASCII_WORD`` are faster forms.
_FIRST_WORD = re.compile(r"[^\W_]*\d(?:\.\d+)+|[^\W_]+")
# Dots, digits (ASCII and not), letters, underscores and blanks: what the dotted-number
# rule is about, drawn far more often than from all of Unicode.
_WORDY = st.text(st.sampled_from("a1.2_ Z9x-\u00e9\u0663\u4e2d'\n"), max_size=60)


@given(st.one_of(_WORDY, st.text(max_size=120)))
def test_the_word_expression_finds_what_it_first_did(text: str) -> None:
    assert _WORD.findall(text) == _FIRST_WORD.findall(text)


@given(st.one_of(_WORDY, _ASCII))
def test_the_ascii_word_expression_finds_the_same_words_in_ascii_text(text: str) -> None:
    if text.isascii():
        lowered = text.lower()
        assert _ASCII_WORD.findall(lowered) == _FIRST_WORD.findall(lowered)


def test_dotted_numbers_need_a_digit_before_the_dot() -> None:
    for text in ("v2.1 ok", "3.14.15x", "file.txt", "a.1", "10.0.0.1.", "x9.8y.7"):
        assert _WORD.findall(text) == _FIRST_WORD.findall(text)
        assert _ASCII_WORD.findall(text) == _FIRST_WORD.findall(text)
    assert _WORD.findall("v2.1 file.txt 10.0.0.1") == ["v2.1", "file", "txt", "10.0.0.1"]


_BLANK = st.sampled_from([" ", "\t", "\n", "  "])


@given(st.text(max_size=120), _BLANK, st.text(max_size=120))
def test_a_content_opening_its_text_is_analysed_once_with_the_same_terms(
    content: str, blank: str, rest: str
) -> None:
    text = content + blank + rest
    assert _continued_terms(content, terms(content), text) == terms(text)
    # a speaker's content keeps the blank after "Name:", its text does not
    assert _continued_terms(" " + content, terms(content), text) == terms(text)


@given(st.text(max_size=120), st.text(max_size=120))
def test_a_text_the_content_does_not_open_is_analysed_whole(content: str, text: str) -> None:
    assert _continued_terms(content, terms(content), text) == terms(text)


def test_a_long_text_and_its_cut_content_index_as_before() -> None:
    text = "Mara: I finally signed up for a pottery class Σ at the centre. " * 3
    content = text[: text.rfind(" ", 0, 100)]
    tf = index_terms(content, None, (), text=text.strip())
    assert tf["potteri"] == 4  # once in the content (cut before 100 characters), 3 in the text
    assert tf["centr"] == 4
    assert tf[SPEAKER_FIELD + "mara"] == 1
