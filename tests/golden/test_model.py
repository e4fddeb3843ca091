"""golden/model.py, calibrate.py and reference.py: the whole integer layer."""

import numpy as np
import pytest

from attn import preset
from golden import (
    FloatMHA,
    QuantizedMHA,
    attention_int,
    calibrate,
    dequantize_output,
    exp_table,
    make_mask,
    mha_float,
    quantize_input,
)
from golden.quant import qmax, qmin
from tests.golden import scalar_model


def random_layer(d_model, heads, seed=0):
    rng = np.random.default_rng(seed)
    s = 1 / np.sqrt(d_model)
    return FloatMHA(rng.normal(0, s, (3 * d_model, d_model)), rng.normal(0, 0.02, 3 * d_model),
                    rng.normal(0, s, (d_model, d_model)), rng.normal(0, 0.02, d_model), heads)


def setup(cfg, seq_len, d_model, heads, seed=0, mask=None):
    mha = random_layer(d_model, heads, seed)
    x = np.random.default_rng(seed + 100).normal(0, 1, (seq_len, d_model))
    qm = calibrate(cfg, mha, x, mask)
    return mha, x, qm, quantize_input(x, qm, cfg)


@pytest.mark.parametrize("rounding", ["half_up", "half_even"])
@pytest.mark.parametrize("shape,causal", [((5, 8, 2), False), ((4, 6, 3), True),
                                          ((3, 4, 1), False)])
def test_matches_the_scalar_model(shape, causal, rounding):
    seq_len, d_model, heads = shape
    cfg = preset("tiny").replace(rounding=rounding, max_heads=3)
    mask = make_mask(seq_len, causal=causal)
    _, _, qm, xi = setup(cfg, seq_len, d_model, heads, mask=mask)
    tr = attention_int(cfg, qm, xi, mask)
    y, probs = scalar_model.attention(cfg, qm, xi.tolist(), mask.tolist(), exp_table(cfg))
    assert tr.y.tolist() == y
    assert tr.probs.tolist() == probs


def test_trace_shapes_and_ranges():
    cfg = preset("default")
    seq_len, d_model, heads = 10, 24, 3
    _, _, qm, xi = setup(cfg, seq_len, d_model, heads)
    tr = attention_int(cfg, qm, xi)
    d = d_model // heads
    shapes = dict(x=(10, 24), acc_qkv=(10, 72), q=(10, 24), k=(10, 24), v=(10, 24),
                  mask=(10, 10), acc_scores=(3, 10, 10), scores=(3, 10, 10), row_max=(3, 10),
                  exp=(3, 10, 10), row_sum=(3, 10), probs=(3, 10, 10), acc_heads=(3, 10, d),
                  heads=(3, 10, d), concat=(10, 24), acc_y=(10, 24), y=(10, 24))
    for name, shape in shapes.items():
        assert getattr(tr, name).shape == shape, name
    for name in ("acc_qkv", "acc_scores", "acc_heads", "acc_y"):
        acc = getattr(tr, name)
        assert qmin(cfg.acc_bits) <= acc.min() and acc.max() <= qmax(cfg.acc_bits), name
    for name, bits in (("q", cfg.qkv_bits), ("scores", cfg.score_bits),
                       ("heads", cfg.head_bits), ("y", cfg.y_bits)):
        arr = getattr(tr, name)
        assert qmin(bits) <= arr.min() and arr.max() <= qmax(bits), name


def test_token_permutation_permutes_outputs_exactly():
    cfg = preset("default")
    _, _, qm, xi = setup(cfg, 12, 16, 4, seed=5)
    perm = np.random.default_rng(9).permutation(12)
    a = attention_int(cfg, qm, xi)
    b = attention_int(cfg, qm, xi[perm])
    assert np.array_equal(b.y, a.y[perm])
    assert np.array_equal(b.probs, a.probs[:, perm][:, :, perm])


def test_probabilities_sum_to_one_within_the_bound():
    cfg = preset("default")
    _, _, qm, xi = setup(cfg, 20, 16, 2, seed=2)
    tr = attention_int(cfg, qm, xi, make_mask(20, causal=True))
    n = (~tr.mask).sum(-1)
    assert np.all(np.abs(tr.probs.sum(-1) - cfg.prob_one) <= (n + 1) // 2)


def test_extreme_inputs_saturate_as_documented():
    cfg = preset("default")
    mha, _, qm, _ = setup(cfg, 8, 16, 2, seed=4)
    for value in (qmax(cfg.x_bits), qmin(cfg.x_bits)):
        tr = attention_int(cfg, qm, np.full((8, 16), value))
        # identical tokens: every score row is constant, so attention is uniform
        assert len(set(tr.probs.ravel().tolist())) == 1
        assert tr.y.min() >= qmin(cfg.y_bits) and tr.y.max() <= qmax(cfg.y_bits)
    # inputs far beyond calibration saturate the projections instead of wrapping
    big = attention_int(cfg, qm, np.full((8, 16), qmax(cfg.x_bits)) * np.sign(mha.in_proj_weight
                                                                              [0][None, :16]))
    assert big.q.min() >= qmin(cfg.qkv_bits) and big.q.max() <= qmax(cfg.qkv_bits)
    assert np.any(big.q == qmax(cfg.qkv_bits)) and np.any(big.q == qmin(cfg.qkv_bits))


def test_one_dominant_key_takes_all_attention():
    cfg = preset("default")
    seq_len = 6
    _, _, qm, xi = setup(cfg, seq_len, 8, 1, seed=8)
    tr = attention_int(cfg, qm, xi, make_mask(seq_len, valid_len=1))
    assert np.all(tr.probs[..., 0] == cfg.prob_one)
    assert np.all(tr.probs[..., 1:] == 0)
    assert np.all(tr.heads == tr.heads[:, :1])   # every query reads token 0's value


def test_fully_masked_rows_give_zero_attention():
    cfg = preset("default")
    _, _, qm, xi = setup(cfg, 5, 8, 2)
    tr = attention_int(cfg, qm, xi, make_mask(5, valid_len=0))
    assert not tr.probs.any() and not tr.row_sum.any()


@pytest.mark.parametrize("shape", [(16, 64, 4), (6, 384, 12), (32, 48, 1)])
def test_accuracy_against_float(shape):
    """Documented accuracy on random layers (docs/numerics.md): below 2.5 % relative error."""
    cfg = preset("default").fitted(*shape)
    mha, x, qm, xi = setup(cfg, *shape, seed=11)
    y = dequantize_output(attention_int(cfg, qm, xi).y, qm)
    ref = mha_float(x, mha)["y"]
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 0.025


def test_float_reference_matches_pytorch():
    torch = pytest.importorskip("torch")
    seq_len, d_model, heads = 7, 12, 3
    mha = random_layer(d_model, heads, seed=3)
    layer = torch.nn.MultiheadAttention(d_model, heads, batch_first=True, dtype=torch.float64)
    state = {"in_proj_weight": mha.in_proj_weight, "in_proj_bias": mha.in_proj_bias,
             "out_proj.weight": mha.out_proj_weight, "out_proj.bias": mha.out_proj_bias}
    layer.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    x = np.random.default_rng(4).normal(0, 1, (seq_len, d_model))
    mask = make_mask(seq_len, causal=True)
    xt = torch.tensor(x)[None]
    y_t, p_t = layer(xt, xt, xt, attn_mask=torch.tensor(mask), need_weights=True,
                     average_attn_weights=False)
    ref = mha_float(x, mha, mask)
    np.testing.assert_allclose(ref["y"], y_t[0].detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ref["probs"], p_t[0].detach().numpy(), rtol=1e-10, atol=1e-12)
    # and the integer model lands within the documented accuracy of PyTorch's output
    cfg = preset("default").fitted(seq_len, d_model, heads)
    qm = calibrate(cfg, mha, x, mask)
    y = dequantize_output(attention_int(cfg, qm, quantize_input(x, qm, cfg), mask).y, qm)
    y_torch = y_t[0].detach().numpy()
    assert np.linalg.norm(y - y_torch) / np.linalg.norm(y_torch) < 0.025


def test_errors_name_the_problem():
    cfg = preset("tiny")
    _, _, qm, xi = setup(cfg, 4, 8, 2)
    with pytest.raises(ValueError, match=r"x must be a 2-D \(L, D\) array"):
        attention_int(cfg, qm, xi[0])
    with pytest.raises(ValueError, match="x has D = 7 features but the model has D = 8"):
        attention_int(cfg, qm, xi[:, :7])
    with pytest.raises(ValueError, match="sequence length L = 9 is outside 1..8"):
        attention_int(cfg, qm, np.zeros((9, 8), int))
    with pytest.raises(ValueError, match="x must hold 16-bit signed integers"):
        attention_int(cfg, qm, xi + 40000)
    with pytest.raises(ValueError, match=r"mask must have shape \(4, 4\)"):
        attention_int(cfg, qm, xi, np.zeros((4, 5), bool))
    with pytest.raises(ValueError, match=r"w_in has values outside \[-8, 7\]"):
        attention_int(cfg.replace(w_bits=4), qm, xi)
    with pytest.raises(ValueError, match=r"in_proj_weight must have shape \(3D, D\)"):
        FloatMHA(np.zeros((5, 4)), np.zeros(12), np.zeros((4, 4)), np.zeros(4), 2)
    with pytest.raises(ValueError, match="D = 6 is not divisible by num_heads = 4"):
        random_layer(6, 4)
    with pytest.raises(ValueError, match="out_proj_bias contains NaN"):
        FloatMHA(np.zeros((12, 4)), np.zeros(12), np.zeros((4, 4)), np.full(4, np.nan), 2)
    with pytest.raises(ValueError, match="valid_len must be in 0..4"):
        make_mask(4, valid_len=5)


def test_quantized_model_round_trips(tmp_path):
    cfg = preset("tiny")
    _, _, qm, xi = setup(cfg, 4, 8, 2)
    qm.save(tmp_path / "q.npz")
    back = QuantizedMHA.load(tmp_path / "q.npz")
    assert np.array_equal(attention_int(cfg, back, xi).y, attention_int(cfg, qm, xi).y)
    assert back.s_x == qm.s_x


def test_calibration_ranges_merge_by_maximum():
    """calibrate() is calibrate_ranges() of measure_ranges(); ranges of several samples merge
    by element-wise maximum, and their constants scale with the inputs."""
    from golden.calibrate import calibrate_ranges, measure_ranges, merge_ranges

    mha = random_layer(8, 2, seed=7)
    rng = np.random.default_rng(8)
    small, large = rng.normal(0, 0.5, (4, 8)), rng.normal(0, 4, (6, 8))
    cfg = preset("default").fitted(6, 8, 2)
    r_small, r_large = measure_ranges(mha, small), measure_ranges(mha, large)
    assert r_small["x"] == np.abs(small).max() and r_small["q"].shape == (2,)
    merged = merge_ranges([r_small, r_large])
    for key in merged:
        assert np.array_equal(merged[key], np.maximum(r_small[key], r_large[key])), key
    assert calibrate_ranges(cfg, mha, merged).s_x == calibrate(cfg, mha, large).s_x
    one = calibrate(cfg, mha, small)
    again = calibrate_ranges(cfg, mha, r_small)
    assert all(np.array_equal(getattr(one, f), getattr(again, f)) for f in ("w_in", "in_mult",
                                                                             "s_q", "s_y"))
    with pytest.raises(ValueError, match="no calibration samples"):
        merge_ranges([])
    with pytest.raises(ValueError, match="NaN"):
        measure_ranges(mha, np.full((2, 8), np.nan))
