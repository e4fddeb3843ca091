"""Bit-exact integer NumPy model of multi-head self-attention (the numerics contract), its
float64 reference and calibration. See docs/numerics.md."""

from .calibrate import calibrate, dequantize_output, quantize_input
from .model import AttentionTrace, QuantizedMHA, attention_int
from .quant import matmul_exact, quantize_multiplier, requantize, round_shift, saturate
from .reference import FloatMHA, make_mask, mha_float
from .softmax import SoftmaxTrace, exp_lookup, exp_table, softmax_int

__all__ = [
    "AttentionTrace", "FloatMHA", "QuantizedMHA", "SoftmaxTrace", "attention_int", "calibrate",
    "dequantize_output", "exp_lookup", "exp_table", "make_mask", "matmul_exact", "mha_float",
    "quantize_input", "quantize_multiplier", "requantize", "round_shift", "saturate",
    "softmax_int",
]
