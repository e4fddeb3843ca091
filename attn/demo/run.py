"""``attn demo``: tag sentences with the attention layer on the (simulated) accelerator, print
the tags, the cycles and the error against float, and draw each head's attention matrix."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from attn.config import preset

from .tagger import Tagger

__all__ = ["DEFAULT_SENTENCES", "run_demo", "plot_attention"]

DEFAULT_SENTENCES = ("I saw a saw", "the duck saw a fish", "they fish near the park",
                     "she bought the old watch", "we watch the light")

#: How the backends are described in the output.
_BACKEND_TEXT = {
    "golden": "the golden integer model (no hardware)",
    "amaranth": "the attention core in the Amaranth simulator",
    "icarus": "the core's Verilog on Icarus Verilog",
    "verilator": "the core's Verilog on Verilator",
    "cosim": "the whole device (UART, host link, core) co-simulated",
    "board": "the board",
}


def _slug(words) -> str:
    return re.sub(r"[^a-z0-9]+", "_", "_".join(words).lower()).strip("_")[:60]


def plot_attention(result, path, head: int, backend: str, prob_one: int) -> None:
    """Draw head ``head``'s attention matrix of ``result`` into the PNG ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    words = result.words
    probs = result.probs[head] / prob_one
    size = 1.2 + 0.6 * len(words)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    image = ax.imshow(probs, cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(words)), words, rotation=45, ha="right")
    ax.set_yticks(range(len(words)), [f"{w} ({t})" for w, t in zip(words, result.tags)])
    ax.set_xlabel("key (attended word)")
    ax.set_ylabel("query (word and its tag)")
    for i in range(len(words)):
        for j in range(len(words)):
            ax.text(j, i, f"{probs[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if probs[i, j] < 0.6 else "black")
    source = ("softmax unit output, " + backend) if result.probs_from_hardware else \
        f"golden = hardware, {backend}"
    ax.set_title(f"head {head}: \"{' '.join(words)}\"\n({source})", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(sentences=None, *, backend: str = "amaranth", out_dir="build/demo",
             preset_name: str = "tiny", port=None, baud=None, quiet: bool = False,
             tagger: Tagger | None = None, out=None) -> list:
    """Tag each sentence (default :data:`DEFAULT_SENTENCES`); print and draw; return the
    :class:`~attn.demo.tagger.TagResult` list. Raises ``ValueError`` (unknown words, too
    long) before running anything."""
    tagger = tagger or Tagger()
    cfg = preset(preset_name)
    sentences = list(sentences or DEFAULT_SENTENCES)
    word_lists = [tagger.words_of(s) for s in sentences]         # check them all first
    for words in word_lists:
        cfg.check_shape(len(words), tagger.mha.d_model, int(tagger.mha.num_heads))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    options = {"port": port, "baud": baud} if backend == "board" else {}

    def say(text=""):
        print(text, file=out or sys.stdout, flush=True)

    say(f"attn demo: a {tagger.mha.num_heads}-head self-attention tagger (D = "
        f"{tagger.mha.d_model}) whose attention layer runs on {_BACKEND_TEXT[backend]} "
        f"(preset {cfg.name!r}: {cfg.rows}x{cfg.cols} array); embedding and classifier on the "
        f"host")
    results = []
    for words in word_lists:
        start = time.perf_counter()
        progress = None if quiet else (lambda line: print(f"  ... {line}", file=sys.stderr))
        result = tagger.tag(words, cfg, backend, progress=progress, **options)
        seconds = time.perf_counter() - start
        results.append(result)
        width = [max(len(w), len(t)) + 2 for w, t in zip(words, result.tags)]
        say()
        say("  " + "".join(w.ljust(n) for w, n in zip(words, width)))
        say("  " + "".join(t.ljust(n) for t, n in zip(result.tags, width)))
        if result.float_tags != result.tags:
            say("  float model: " + " ".join(result.float_tags))
        cycles = f"{result.cycles:,} cycles, " if result.cycles is not None else ""
        exact = "equals golden/ integer for integer" if result.golden_equal else \
            "DIFFERS FROM GOLDEN"
        say(f"  {cycles}output {exact}; error vs float64 {result.rel_error:.2%} (max "
            f"{result.max_error:.4f}); {seconds:.1f} s")
        paths = []
        for head in range(result.probs.shape[0]):
            path = out_dir / f"{_slug(words)}_head{head}.png"
            plot_attention(result, path, head, backend, cfg.prob_one)
            paths.append(str(path))
        say(f"  attention: {', '.join(paths)}")
        if not result.probs_from_hardware and backend != "golden":
            say(f"  (the {backend} backend does not expose its probabilities: the maps show "
                f"golden's, equal to the hardware's by contract; its output was checked equal)")
        if not result.golden_equal:
            raise AssertionError(f"the {backend} output differs from golden for {words}")
    return results


def main(args) -> int:
    """The ``attn demo`` subcommand (``args`` from :mod:`attn.cli`)."""
    if args.vocabulary:
        tagger = Tagger()
        print(" ".join(tagger.vocab))
        return 0
    sentences = [" ".join(args.words)] if args.words else None
    run_demo(sentences, backend=args.backend, out_dir=args.out, preset_name=args.preset,
             port=args.port, baud=args.baud, quiet=args.quiet)
    return 0
