"""The training script: reproducible, and a short run already tags the grammar."""
import numpy as np
import pytest

pytest.importorskip("torch")

from attn.demo.tagger import Tagger  # noqa: E402
from attn.demo.train import main, train  # noqa: E402


def test_training_is_reproducible():
    a = train(epochs=2, sentences=300, seed=3, log=None)
    b = train(epochs=2, sentences=300, seed=3, log=None)
    for key in ("embed", "in_proj_weight", "cls_weight"):
        assert np.array_equal(a[key], b[key])


def test_train_writes_a_loadable_tagger(tmp_path):
    out = tmp_path / "t.npz"
    assert main(["--out", str(out), "--epochs", "3", "--sentences", "600"]) == 0
    tagger = Tagger(out)
    assert tagger.words_of("I saw a saw") == ["I", "saw", "a", "saw"]


def test_committed_weights_record_their_training():
    with np.load(Tagger().__class__.__init__.__globals__["WEIGHTS"]) as f:
        assert float(f["accuracy_ambiguous"]) >= 0.99
        assert int(f["epochs"]) > 0


@pytest.mark.slow
def test_default_training_reproduces_the_committed_weights(tmp_path):
    """``python -m attn.demo.train`` rewrites the committed file with the same numbers
    (same torch build; float results may differ across torch versions or CPUs)."""
    from attn.demo.tagger import WEIGHTS
    out = tmp_path / "t.npz"
    assert main(["--out", str(out)]) == 0
    with np.load(out) as new, np.load(WEIGHTS) as old:
        assert sorted(new.files) == sorted(old.files)
        for key in old.files:
            assert np.array_equal(new[key], old[key]), key
