"""Verification harness: stream drivers and monitors for the Amaranth simulator and cocotb, an
exact scoreboard against golden/, and runners for Icarus and Verilator."""
