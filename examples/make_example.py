"""Make the bundled example: a random nn.MultiheadAttention layer (D = 64, H = 4) and a
16-token input with one outlier feature, in the file formats of ``attn run``.

    python examples/make_example.py   # rewrites examples/model.npz and examples/input.npz
"""

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def make(seed: int = 2026, seq_len: int = 16, d_model: int = 64, heads: int = 4):
    rng = np.random.default_rng(seed)
    scale = 1 / np.sqrt(d_model)
    model = {
        "in_proj_weight": rng.normal(0, scale, (3 * d_model, d_model)).astype(np.float32),
        "in_proj_bias": rng.normal(0, 0.02, 3 * d_model).astype(np.float32),
        "out_proj.weight": rng.normal(0, scale, (d_model, d_model)).astype(np.float32),
        "out_proj.bias": rng.normal(0, 0.02, d_model).astype(np.float32),
        "num_heads": np.int64(heads),
    }
    x = rng.normal(0, 1, (seq_len, d_model))
    x[:, 5] *= 8  # an outlier feature, as real activations have
    return model, {"x": x.astype(np.float32)}


if __name__ == "__main__":
    model, inputs = make()
    np.savez(HERE / "model.npz", **model)
    np.savez(HERE / "input.npz", **inputs)
    print(f"wrote {HERE / 'model.npz'} and {HERE / 'input.npz'}")
