"""attn demo end to end: printed tags, PNG files that are images, errors for bad words."""
import io

import matplotlib.image
import pytest

from attn.cli import main
from attn.demo.run import run_demo

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_demo_prints_tags_and_draws(tmp_path):
    out = io.StringIO()
    results = run_demo(["I saw a saw"], out_dir=tmp_path, out=out, quiet=True)
    text = out.getvalue()
    assert "PRON  VERB  DET  NOUN" in text and "equals golden/" in text and "cycles" in text
    pngs = sorted(tmp_path.glob("i_saw_a_saw_head*.png"))
    assert len(pngs) == results[0].probs.shape[0] == 2
    for png in pngs:
        assert png.read_bytes().startswith(PNG_SIGNATURE)
        assert matplotlib.image.imread(png).ndim == 3


def test_cli_demo(tmp_path, capsys):
    assert main(["demo", "they", "fish", "--backend", "golden", "--out", str(tmp_path)]) == 0
    assert "PRON  VERB" in capsys.readouterr().out
    assert main(["demo", "I", "saw", "a", "zebra", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown word(s) 'zebra'" in err and "--vocabulary" in err
    assert main(["demo", "--vocabulary"]) == 0
    assert "saw" in capsys.readouterr().out.split()


@pytest.mark.parametrize("backend", ["cosim"])
def test_demo_on_the_cosimulated_device(tmp_path, backend):
    """The same tags through the whole device, UART included."""
    out = io.StringIO()
    results = run_demo(["I saw a saw"], backend=backend, out_dir=tmp_path, out=out, quiet=True)
    assert results[0].tags == ["PRON", "VERB", "DET", "NOUN"] and results[0].golden_equal
    assert not results[0].probs_from_hardware and "the maps show golden's" in out.getvalue()
