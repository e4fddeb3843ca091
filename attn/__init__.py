"""FPGA accelerator for transformer self-attention: configuration and command line."""

from .config import PRESETS, AttnConfig, preset

__all__ = ["AttnConfig", "PRESETS", "preset"]
__version__ = "0.1.0"
