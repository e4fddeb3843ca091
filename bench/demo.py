"""Benchmark of the "I saw a saw" demo (``attn demo``): the tagger's accuracy, and its attention
layer on the simulated core.

1. Tagging accuracy on a held-out corpus of the demo's grammar (:func:`attn.demo.grammar.corpus`
   with a seed that neither training, its test set nor the calibration corpus uses): word and
   sentence accuracy, and accuracy on the ambiguous words alone (:data:`grammar.AMBIGUOUS`,
   e.g. "saw" as VERB or NOUN), for the float model (float64 attention) and for the integer
   attention of golden/ (the hardware's contract: the core equals it bit for bit), through
   :meth:`Tagger.tag` on the ``golden`` backend; the words on which the two disagree; and a
   table per ambiguous word.
2. The demo sentences of ``attn demo`` (:data:`attn.demo.run.DEFAULT_SENTENCES`) with the
   attention layer on the core in the Amaranth simulator: tags (checked against the grammar),
   cycles, error vs float64, whether the output equals golden/'s, and the wall time per
   sentence; with ``--backend``, the same on Verilator (or Icarus), whose first sentence
   includes building the simulator if the core changed.

All on the ``tiny`` preset, as ``attn demo``, unless ``--preset`` names another. Exit code 1
if a simulated core differs from golden/.

    python -m bench.demo [--quick] [--backend verilator|icarus] [--preset NAME]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from attn.config import preset
from attn.demo import grammar, train
from attn.demo.run import DEFAULT_SENTENCES
from attn.demo.tagger import CALIB_SEED, WEIGHTS, Tagger
from golden import dequantize_output, mha_float

from .common import print_table, write_json

#: Held-out corpus: training uses ``train.SEED`` and tests on ``train.SEED + 1``; calibration
#: uses ``CALIB_SEED``.
HELD_OUT_SEED = train.SEED + 2
HELD_OUT, QUICK_HELD_OUT = 1000, 200
QUICK_DEMO = 2                      # demo sentences with --quick
PRESET = "tiny"                     # attn demo's default

assert HELD_OUT_SEED not in (train.SEED, train.SEED + 1, CALIB_SEED)


def grammar_tags(words) -> list | None:
    """The grammar's tags of ``words`` if exactly one template fits them, else ``None``."""
    fits = [list(t) for t in grammar.TEMPLATES if len(t) == len(words)
            and all(w.lower() in (x.lower() for x in grammar.LEXICON[tag])
                    for w, tag in zip(words, t))]
    return fits[0] if len(fits) == 1 else None


def _share(hits, total) -> float | None:
    return hits / total if total else None


def _scores(truth, pred, words) -> dict:
    """Accuracy of the tag lists ``pred`` against ``truth`` (lists of sentences)."""
    right = [[p == t for p, t in zip(ps, ts)] for ps, ts in zip(pred, truth)]
    flat = [r for rs in right for r in rs]
    amb = [(r, t) for rs, ts, ws in zip(right, truth, words) for r, t, w in zip(rs, ts, ws)
           if w in grammar.AMBIGUOUS]
    verb = [r for r, t in amb if t == "VERB"]
    noun = [r for r, t in amb if t == "NOUN"]
    return dict(words=len(flat), word_acc=_share(sum(flat), len(flat)),
                sentences=len(right), sentence_acc=_share(sum(map(all, right)), len(right)),
                ambiguous=len(amb), ambiguous_acc=_share(sum(r for r, _ in amb), len(amb)),
                ambiguous_verb=len(verb), ambiguous_verb_acc=_share(sum(verb), len(verb)),
                ambiguous_noun=len(noun), ambiguous_noun_acc=_share(sum(noun), len(noun)))


def _margins(tagger: Tagger, x, y, truth) -> np.ndarray:
    """Per word: the classifier's logit of the true tag minus the best other logit (negative:
    a wrong tag), as :meth:`Tagger.classify` computes the logits."""
    logits = (x + y) @ tagger.cls_weight.T + tagger.cls_bias
    true = np.array([tagger.tags.index(t) for t in truth])
    right = logits[np.arange(len(true)), true]
    logits[np.arange(len(true)), true] = -np.inf
    return right - logits.max(axis=1)


def corpus_accuracy(tagger: Tagger, cfg, count: int) -> dict:
    """Float and golden/ integer tags of ``count`` held-out sentences against the grammar's."""
    corpus = grammar.corpus(count, HELD_OUT_SEED)
    seen = {tuple(w) for w, _ in grammar.corpus(train.SENTENCES, train.SEED)}
    words, truth, float_tags, int_tags, rel, max_err = [], [], [], [], [], []
    margins = {"float64": [], "golden/ integer": []}
    start = time.perf_counter()
    for w, t in corpus:
        r = tagger.tag(w, cfg, "golden")
        x = tagger.embed_words(w)
        margins["float64"].append(_margins(tagger, x, mha_float(x, tagger.mha)["y"], t))
        margins["golden/ integer"].append(
            _margins(tagger, x, dequantize_output(r.y_int, tagger.quantized(cfg)), t))
        words.append(w)
        truth.append(t)
        float_tags.append(r.float_tags)
        int_tags.append(r.tags)
        rel.append(r.rel_error)
        max_err.append(r.max_error)
    seconds = time.perf_counter() - start
    unseen = [i for i, w in enumerate(words) if tuple(w) not in seen]

    def pick(items, idx):
        return [items[i] for i in idx]

    models = {"float64": float_tags, "golden/ integer": int_tags}
    scores = {m: _scores(truth, tags, words) for m, tags in models.items()}
    is_amb = np.array([w in grammar.AMBIGUOUS for ws in words for w in ws])
    for m, ms in margins.items():
        flat = np.concatenate(ms)
        scores[m].update(margin_min=float(flat.min()),
                         margin_min_ambiguous=float(flat[is_amb].min()),
                         margin_mean=float(flat.mean()))
    shift = np.abs(np.concatenate(margins["golden/ integer"])
                   - np.concatenate(margins["float64"]))
    unseen_scores = {m: _scores(pick(truth, unseen), pick(tags, unseen), pick(words, unseen))
                     for m, tags in models.items()}
    # the words the two models tag differently, and which one is right there
    differ = [(f == g, f == t, g == t, w in grammar.AMBIGUOUS)
              for ws, ts, fs, gs in zip(words, truth, float_tags, int_tags)
              for w, t, f, g in zip(ws, ts, fs, gs) if f != g]
    disagree = dict(words=len(differ), ambiguous=sum(d[3] for d in differ),
                    float_right=sum(d[1] for d in differ), golden_right=sum(d[2] for d in differ),
                    sentences=sum(fs != gs for fs, gs in zip(float_tags, int_tags)))
    per_word = []
    for amb in grammar.AMBIGUOUS:
        cells = [(t, f, g) for ws, ts, fs, gs in zip(words, truth, float_tags, int_tags)
                 for w, t, f, g in zip(ws, ts, fs, gs) if w == amb]
        row = dict(word=amb, verb=sum(t == "VERB" for t, _, _ in cells),
                   noun=sum(t == "NOUN" for t, _, _ in cells))
        for name, k in (("float", 1), ("golden", 2)):
            for tag in ("VERB", "NOUN"):
                n = [c for c in cells if c[0] == tag]
                row[f"{name}_{tag.lower()}_acc"] = _share(sum(c[k] == tag for c in n), len(n))
        per_word.append(row)
    return dict(seed=HELD_OUT_SEED, sentences=count, seen_in_training=count - len(unseen),
                scores=scores, unseen_scores=unseen_scores, disagree=disagree,
                per_word=per_word, margin_shift_max=float(shift.max()),
                margin_shift_mean=float(shift.mean()), rel_error_mean=float(np.mean(rel)),
                rel_error_max=float(np.max(rel)), max_error=float(np.max(max_err)),
                seconds=seconds)


def demo_runs(tagger: Tagger, cfg, sentences, backend: str) -> list:
    """Each demo sentence tagged with the attention layer on ``backend``."""
    rows = []
    for sentence in sentences:
        words = tagger.words_of(sentence)
        print(f"bench.demo: {backend}: {sentence!r}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        r = tagger.tag(words, cfg, backend)
        seconds = time.perf_counter() - start
        expected = grammar_tags(words)
        rows.append(dict(backend=backend, sentence=sentence, tags=r.tags,
                         float_tags=r.float_tags, expected=expected,
                         correct=None if expected is None else r.tags == expected,
                         cycles=r.cycles, rel_error=r.rel_error, max_error=r.max_error,
                         golden_equal=r.golden_equal, seconds=seconds))
    return rows


def _pct(x) -> str:
    return "—" if x is None else f"{x:.2%}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_HELD_OUT} held-out sentences, {QUICK_DEMO} demo sentences")
    parser.add_argument("--backend", choices=["verilator", "icarus"], default=None,
                        help="also run the demo sentences on this simulator")
    parser.add_argument("--preset", default=PRESET,
                        help=f"configuration (default {PRESET}; icebreaker_mini is the "
                             f"iCEBreaker's)")
    args = parser.parse_args(argv)
    tagger = Tagger()
    cfg = preset(args.preset)
    count = QUICK_HELD_OUT if args.quick else HELD_OUT
    sentences = list(DEFAULT_SENTENCES[:QUICK_DEMO] if args.quick else DEFAULT_SENTENCES)
    start = time.perf_counter()

    print(f"bench.demo: {count} held-out sentences on golden/", file=sys.stderr, flush=True)
    acc = corpus_accuracy(tagger, cfg, count)
    sim_rows = demo_runs(tagger, cfg, sentences, "amaranth")
    if args.backend:
        try:
            sim_rows += demo_runs(tagger, cfg, sentences, args.backend)
        except ValueError as exc:           # e.g. the simulator is not installed
            print(f"bench.demo: error: {exc}", file=sys.stderr)
            return 2
    seconds = time.perf_counter() - start

    table = []
    for name, s in acc["scores"].items():
        u = acc["unseen_scores"][name]
        table.append(dict(model=name, words=s["words"], word_acc=_pct(s["word_acc"]),
                          sentence_acc=_pct(s["sentence_acc"]), ambiguous=s["ambiguous"],
                          amb_acc=_pct(s["ambiguous_acc"]),
                          amb_verb=_pct(s["ambiguous_verb_acc"]),
                          amb_noun=_pct(s["ambiguous_noun_acc"]),
                          unseen_word_acc=_pct(u["word_acc"]),
                          unseen_amb_acc=_pct(u["ambiguous_acc"]),
                          margin_min=f"{s['margin_min']:.2f}",
                          margin_amb=f"{s['margin_min_ambiguous']:.2f}",
                          margin_mean=f"{s['margin_mean']:.2f}"))
    print_table(table, ["model", "words", "word_acc", "sentence_acc", "ambiguous", "amb_acc",
                        "amb_verb", "amb_noun", "unseen_word_acc", "unseen_amb_acc",
                        "margin_min", "margin_amb", "margin_mean"],
                f"Tagging accuracy: {count} held-out sentences (grammar seed {HELD_OUT_SEED}), "
                f"preset {cfg.name!r}")
    d = acc["disagree"]
    unseen = count - acc["seen_in_training"]
    weights = np.load(WEIGHTS)
    print(f"\n{acc['seen_in_training']} of the {count} sentences also occur in the training "
          f"corpus; unseen_* = the other {unseen}. Training's own held-out figures (PyTorch "
          f"float32, seed {train.SEED + 1}): {float(weights['accuracy']):.2%}, ambiguous "
          f"{float(weights['accuracy_ambiguous']):.2%}.")
    print("margin: the true tag's logit minus the best other one (min over every word, over "
          "the ambiguous words, mean); negative = a wrong tag.")
    which = (f": float64 right on {d['float_right']}, golden/ on {d['golden_right']}"
             if d["words"] else "")
    print(f"float64 and golden/ tag {d['words']} of {acc['scores']['float64']['words']} words "
          f"differently ({d['ambiguous']} ambiguous; {d['sentences']} sentences){which}; the "
          f"integer attention moves a word's margin by {acc['margin_shift_mean']:.3f} on "
          f"average, {acc['margin_shift_max']:.3f} at most. Attention output vs "
          f"float64: relative error mean {acc['rel_error_mean']:.2%}, max "
          f"{acc['rel_error_max']:.2%}; largest element error {acc['max_error']:.4f}; "
          f"accuracy pass {acc['seconds'] / count * 1000:.1f} ms per sentence.")

    print_table([dict(word=r["word"], verb=r["verb"], noun=r["noun"],
                      float_verb=_pct(r["float_verb_acc"]), float_noun=_pct(r["float_noun_acc"]),
                      golden_verb=_pct(r["golden_verb_acc"]),
                      golden_noun=_pct(r["golden_noun_acc"])) for r in acc["per_word"]],
                ["word", "verb", "noun", "float_verb", "float_noun", "golden_verb",
                 "golden_noun"], "Ambiguous words: occurrences as VERB / NOUN and accuracy")

    print_table([dict(backend=r["backend"], sentence=r["sentence"], tags=" ".join(r["tags"]),
                      grammar={None: "?", True: "ok", False: "WRONG"}[r["correct"]],
                      float="=" if r["float_tags"] == r["tags"] else " ".join(r["float_tags"]),
                      cycles="—" if r["cycles"] is None else f"{r['cycles']:,}",
                      rel_err=f"{r['rel_error']:.2%}", max_err=f"{r['max_error']:.4f}",
                      golden_equal="yes" if r["golden_equal"] else "NO",
                      seconds=f"{r['seconds']:.2f}") for r in sim_rows],
                ["backend", "sentence", "tags", "grammar", "float", "cycles", "rel_err",
                 "max_err", "golden_equal", "seconds"],
                f"Demo sentences on the simulated core (preset {cfg.name!r}: {cfg.rows}x{cfg.cols} "
                f"array)")
    summary = {}
    for backend in dict.fromkeys(r["backend"] for r in sim_rows):
        runs = [r for r in sim_rows if r["backend"] == backend]
        secs = [r["seconds"] for r in runs]
        summary[backend] = dict(sentences=len(runs), seconds_mean=float(np.mean(secs)),
                                seconds_min=float(np.min(secs)),
                                seconds_max=float(np.max(secs)), seconds_first=secs[0],
                                seconds_rest_mean=float(np.mean(secs[1:])) if secs[1:] else None,
                                golden_equal=all(r["golden_equal"] for r in runs))
        rest = f", then {np.mean(secs[1:]):.2f} on average" if secs[1:] else ""
        print(f"{backend}: {np.mean(secs):.2f} s per sentence (min {np.min(secs):.2f}, max "
              f"{np.max(secs):.2f}; first {secs[0]:.2f}{rest}; Tagger.tag wall time, "
              f"simulation and any simulator build included)"
              + ("" if summary[backend]["golden_equal"] else "; output DIFFERS from golden/"))
    print(f"wall time {seconds:.1f} s")
    write_json("demo", dict(preset=cfg.name, quick=args.quick, accuracy=acc, demo=sim_rows,
                            simulation=summary, seconds=seconds))
    return 0 if all(s["golden_equal"] for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
