"""A little tagged language for the demo: short sentences whose ambiguous words ("saw", "fish",
"duck", "watch", "light", "park", "ring", "book") are verbs in some places and nouns in others,
so that only the context tells the tag.

:func:`corpus` draws ``(words, tags)`` pairs from a handful of sentence templates with a seeded
generator; the same seed gives the same corpus. Tags: ``PRON`` (pronoun), ``VERB``, ``DET``
(determiner), ``NOUN``, ``ADJ`` (adjective), ``ADP`` (preposition).
"""

from __future__ import annotations

import random

__all__ = ["TAGS", "AMBIGUOUS", "LEXICON", "TEMPLATES", "vocabulary", "corpus", "MAX_WORDS"]

TAGS = ("PRON", "VERB", "DET", "NOUN", "ADJ", "ADP")

#: Words that are a verb or a noun depending on where they stand.
AMBIGUOUS = ("saw", "fish", "duck", "watch", "light", "park", "ring", "book")

#: Words of each tag (the ambiguous ones are in both VERB and NOUN).
LEXICON = {
    "PRON": ("I", "you", "she", "he", "we", "they"),
    "VERB": ("see", "cut", "like", "need", "want", "have", "found", "bought") + AMBIGUOUS,
    "DET": ("a", "the", "my", "your", "this", "that"),
    "NOUN": ("man", "woman", "dog", "cat", "tree", "car", "boat", "table") + AMBIGUOUS,
    "ADJ": ("old", "new", "big", "small", "red", "sharp"),
    "ADP": ("in", "on", "near", "with", "under"),
}

#: Sentence shapes, as tag sequences (at most :data:`MAX_WORDS` words).
TEMPLATES = (
    ("PRON", "VERB", "DET", "NOUN"),                              # I saw a saw
    ("PRON", "VERB", "DET", "ADJ", "NOUN"),                       # she bought the old book
    ("DET", "NOUN", "VERB", "DET", "NOUN"),                       # the duck saw a fish
    ("DET", "ADJ", "NOUN", "VERB", "DET", "NOUN"),                # a big dog found my ring
    ("PRON", "VERB", "DET", "NOUN", "ADP", "DET", "NOUN"),        # we park the car near the park
    ("DET", "NOUN", "ADP", "DET", "NOUN", "VERB", "DET", "NOUN"),  # the man in the boat saw a duck
    ("PRON", "VERB"),                                             # they fish
    ("DET", "NOUN", "VERB"),                                      # the dog saw
    ("PRON", "VERB", "ADP", "DET", "NOUN"),                       # I fish near the park
)

MAX_WORDS = max(len(t) for t in TEMPLATES)


def vocabulary() -> list:
    """Every word, in a fixed order (the embedding rows of the tagger)."""
    words = []
    for tag in TAGS:
        for word in LEXICON[tag]:
            if word not in words:
                words.append(word)
    return words


def corpus(count: int, seed: int = 0, *, ambiguous_share: float = 0.5) -> list:
    """``count`` tagged sentences ``(words, tags)``; in about ``ambiguous_share`` of the
    VERB/NOUN slots the word is drawn from :data:`AMBIGUOUS`."""
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a non-negative int, not {count!r}")
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        tags = rng.choice(TEMPLATES)
        words = []
        for tag in tags:
            if tag in ("VERB", "NOUN") and rng.random() < ambiguous_share:
                words.append(rng.choice(AMBIGUOUS))
            else:
                choices = [w for w in LEXICON[tag] if w not in AMBIGUOUS]
                words.append(rng.choice(choices))
        sentences.append((words, list(tags)))
    return sentences
