"""How far a result may be from the one it is checked against: the one table that the
tests, the benchmark, the suites and the memory-bound families all read.

Each entry is a relative Frobenius error, ``||c - ref||_F / ||ref||_F``, keyed first by
what ``ref`` is and then by the dtype:

- ``"float64"``: float64 of the same inputs (as rounded), what the tests check a product
  against. Only the product's own rounding counts. float32's sums keep 24 bits; TF32 rounds
  the inputs to 10-bit mantissas; 16-bit results are rounded to 11 bits (float16) or 8
  (bfloat16).
- ``"8-bit"``: float64 of an 8-bit product's dequantised inputs, keyed by the result's
  dtype. int32 holds the exact sums. A float result is bounded by its own rounding and by
  FP8 wgmma's sums, which keep fewer bits than float32: on the H100, 1.3e-3 at K = 4096 for
  a float32 result of e4m3 inputs, growing about as sqrt(K).
- ``"cuBLAS"``: cuBLAS's result, what the benchmark checks each variant against. Both
  round, and the benchmark's sizes reach K = 8192, so this is looser than ``"float64"``.
- ``"layers"``: a few layers' parameter gradients against the same layers' in float64,
  each layer's result rounded to the dtype before the next one reads it.
- ``"CuPy"``: CuPy's own transpose, reverse or stencil, for the memory-bound families. For
  sum it is the error over the sum of ``|x|``, against the float64 sum.

Example:
    >>> from xgemm.tools.tolerances import TOLERANCE
    >>> TOLERANCE["float64"]["float32"], TOLERANCE["cuBLAS"]["tf32"]
    (1e-05, 0.005)
"""

from __future__ import annotations

TOLERANCE: dict[str, dict[str, float]] = {
    "float64": {"float64": 1e-12, "float32": 1e-5, "tf32": 5e-3, "float16": 1e-2,
                "bfloat16": 1e-2},
    "8-bit": {"int32": 0.0, "bfloat16": 1e-2, "float16": 5e-3, "float32": 5e-3},
    "cuBLAS": {"float64": 1e-10, "float32": 1e-4, "tf32": 5e-3, "float16": 1e-2,
               "bfloat16": 2e-2},
    "layers": {"float32": 1e-5, "float16": 2e-2, "bfloat16": 4e-2},
    "CuPy": {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 2e-2},
}
