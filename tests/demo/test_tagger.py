"""The committed tagger: "I saw a saw" is PRON VERB DET NOUN on golden/ and on the simulated
core, bit-exact, and its sentences from the grammar are tagged right."""
import numpy as np
import pytest

from attn import preset
from attn.demo import grammar
from attn.demo.tagger import Tagger, UnknownWords


@pytest.fixture(scope="module")
def tagger():
    return Tagger()


@pytest.mark.parametrize("backend", ["golden", "amaranth"])
def test_i_saw_a_saw(tagger, backend):
    result = tagger.tag("I saw a saw", preset("tiny"), backend)
    assert result.tags == ["PRON", "VERB", "DET", "NOUN"]
    assert result.golden_equal
    assert result.probs_from_hardware == (backend == "amaranth")
    if backend == "amaranth":
        assert result.cycles > 0
    # the two "saw"s have the same embedding apart from position: their attention rows differ
    assert not np.array_equal(result.probs[:, 1], result.probs[:, 3])
    assert result.rel_error < 0.02


def test_grammar_sentences_are_tagged(tagger):
    cfg = preset("tiny")
    sentences = grammar.corpus(150, seed=2024)
    right = sum(tagger.tag(words, cfg, "golden").tags == tags for words, tags in sentences)
    assert right == len(sentences)


def test_position_matters(tagger):
    """Without position embeddings both "saw"s would get the same tag."""
    x = tagger.embed_words(["I", "saw", "a", "saw"])
    assert not np.allclose(x[1], x[3])
    assert np.allclose(x[1] - tagger.pos[1], x[3] - tagger.pos[3])


def test_bad_sentences(tagger):
    with pytest.raises(UnknownWords, match="'sawed', 'zebra'"):
        tagger.words_of("I sawed a zebra")
    with pytest.raises(ValueError, match="too long"):
        tagger.words_of(" ".join(["the"] * (tagger.max_words + 1)))
    with pytest.raises(ValueError, match="at least one word"):
        tagger.words_of("")
