"""Byte units, defined once (binary: memory is built and reported by drivers in powers of two), the data sheets'
rates (decimal), and how a size reads to a person."""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
# Rates, decimal as data sheets give them
GB_PER_S = 1e9
GFLOPS = 1e9
TFLOPS = 1e12


def gib(n: float) -> str:
    """A size in GiB with one decimal: the unit every memory table and message of tunefleet uses."""
    return f"{n / GiB:,.1f} GiB"


def size(n: float) -> str:
    """A size in the largest binary unit that keeps it at least 1, two decimals past KiB ("812.50 KiB",
    "1.27 GiB"): a tiny CPU model's figures stay readable where gib() would print 0.0."""
    for unit, scale in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{int(n)} bytes"
