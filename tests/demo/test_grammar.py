"""The demo's grammar: deterministic, ambiguous words in both roles, within the tagger's size."""
from attn.demo import grammar


def test_deterministic_and_bounded():
    a, b = grammar.corpus(300, seed=4), grammar.corpus(300, seed=4)
    assert a == b and a != grammar.corpus(300, seed=5)
    for words, tags in a:
        assert len(words) == len(tags) <= grammar.MAX_WORDS
        assert all(w in grammar.LEXICON[t] for w, t in zip(words, tags))


def test_ambiguous_words_take_both_tags():
    seen = {}
    for words, tags in grammar.corpus(2000, seed=0):
        for w, t in zip(words, tags):
            if w in grammar.AMBIGUOUS:
                seen.setdefault(w, set()).add(t)
    assert set(seen) == set(grammar.AMBIGUOUS)
    assert all(tags == {"VERB", "NOUN"} for tags in seen.values())


def test_vocabulary_has_no_duplicates():
    vocab = grammar.vocabulary()
    assert len(vocab) == len(set(vocab))
    assert "saw" in vocab and "I" in vocab
