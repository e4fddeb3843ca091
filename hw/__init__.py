"""Gateware blocks of the accelerator (Amaranth ``wiring.Component``s)."""

from .divider import Divider, divider_input_layout, divider_output_layout
from .dsp import DSP_LATENCY, Multiplier
from .pe import CONTROL, ProcessingElement
from .requant import Requantizer, param_layout
from .softmax import Softmax, softmax_input_layout, softmax_output_layout
from .systolic import SystolicArray, input_layout, output_layout

__all__ = ["Divider", "Softmax", "divider_input_layout", "divider_output_layout",
           "softmax_input_layout", "softmax_output_layout",
           "DSP_LATENCY", "Multiplier", "CONTROL", "ProcessingElement", "Requantizer",
           "param_layout", "SystolicArray", "input_layout", "output_layout"]
