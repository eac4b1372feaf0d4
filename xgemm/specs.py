"""What a kernel is specialised on: the dtypes xgemm multiplies (their C, NumPy and
accumulator types), the outputs each may be stored as, the epilogue's activations and
8-bit scalings, and :class:`Spec`, one compiled specialisation of a variant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """How one NumPy dtype is computed: its CUDA C type, ``acc``, the type the epilogue
    computes in and the CUDA-core rungs sum in (a template's ``Acc``; a tensor-core rung
    sums into its instruction's type, its ``Sum``: int32 for int8), and its size
    (``BYTES`` in a declaration's expressions)."""

    cuda: str
    acc: str
    itemsize: int


#: The dtypes xgemm multiplies, by NumPy name (the 8-bit formats below join them: by
#: PyTorch's name, as CuPy holds FP8 as uint8). The 16-bit types accumulate in float.
DTYPES = {
    "float32": DType("float", "float", 4),
    "float64": DType("double", "double", 8),
    "float16": DType("__half", "float", 2),
    "bfloat16": DType("__nv_bfloat16", "float", 2),
}
#: The 8-bit formats, by PyTorch's and ml_dtypes' names: only the 8-bit rungs multiply
#: them (``wgmma_8bit`` on sm_90, ``mma_int8`` for int8 from sm_80). FP8 sums accumulate
#: in float; int8 sums in int32, and the epilogue works in float. In memory they are
#: bytes: CuPy holds no float8 dtype, so a CuPy caller passes uint8 arrays and names the
#: format (``formats=``).
EIGHT_BIT = {
    "float8_e4m3fn": DType("__nv_fp8_e4m3", "float", 1),
    "float8_e5m2": DType("__nv_fp8_e5m2", "float", 1),
    "int8": DType("signed char", "float", 1),
}
DTYPES.update(EIGHT_BIT)
#: The floating dtypes of 16, 32 and 64 bits, which every rung before the 8-bit one
#: multiplies (``Variant.dtypes``' default).
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
#: What an 8-bit product may be stored as, the default first: bfloat16 for FP8 (there is
#: no FP8 output), int32 (exact, no epilogue) for int8.
EIGHT_BIT_OUTPUTS = {"float8_e4m3fn": ("bfloat16", "float16", "float32"),
                     "float8_e5m2": ("bfloat16", "float16", "float32"),
                     "int8": ("int32", "bfloat16", "float16", "float32")}
#: C's CUDA type, by NumPy name: the input dtypes' and int32.
C_TYPES = {**{name: t.cuda for name, t in DTYPES.items()}, "int32": "int"}
#: How an 8-bit product's scales apply (``Spec.scale_a``, ``scale_b``): none, one for the
#: whole operand (a GPU scalar), or one per row of A / per column of B (a GPU vector).
SCALINGS = ("none", "tensor", "vector")


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype called ``name``; bfloat16 is ml_dtypes' (imported only for it).

    >>> numpy_dtype("float16").itemsize
    2
    """
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


#: The one other output dtype a product may be stored in: 16-bit inputs' float32 sums,
#: unrounded (``out_dtype="float32"``, or an ``out``/``c`` of float32).
UNROUNDED_OUTPUT = "float32"
#: Input dtypes that may be stored as UNROUNDED_OUTPUT.
SIXTEEN_BIT = ("float16", "bfloat16")

#: The activations an epilogue can apply, as the templates name them.
ACTIVATIONS = ("none", "relu", "gelu", "silu")


@dataclass(frozen=True)
class Spec:
    """Everything that selects a compiled kernel besides the tile parameters: the dtype,
    how A and B lie in memory (column-major or not), the fused epilogue and the variant's
    own boolean flags. Each distinct Spec is rendered and compiled once.

    >>> Spec("float16", b_col=True, activation="relu").read_c
    False
    """

    dtype: str = "float32"
    a_col: bool = False
    b_col: bool = False
    bias: bool = False
    activation: str = "none"
    read_c: bool = False  # the epilogue adds beta * C (False when beta == 0: C is not read)
    flags: tuple[tuple[str, bool], ...] = ()
    out_dtype: str | None = None  # C's (and bias's) dtype: None, the inputs'; or UNROUNDED_OUTPUT
    #                               (8-bit inputs: one of EIGHT_BIT_OUTPUTS)
    b_dtype: str | None = None    # B's dtype where it differs from A's (FP8: e4m3 x e5m2)
    scale_a: str = "none"         # 8-bit only: SCALINGS of A's rows and B's columns
    scale_b: str = "none"

    @property
    def c_dtype(self) -> str:
        """C's dtype: ``out_dtype``, else the inputs' (an 8-bit product's default output)."""
        return self.out_dtype or default_output(self.dtype)


def default_output(dtype: str) -> str:
    """The dtype a product of ``dtype`` inputs is stored in unless asked otherwise.

    >>> default_output("float16"), default_output("float8_e4m3fn"), default_output("int8")
    ('float16', 'bfloat16', 'int32')
    """
    return EIGHT_BIT_OUTPUTS[dtype][0] if dtype in EIGHT_BIT_OUTPUTS else dtype


def check_eight_bit_spec(spec: Spec) -> None:
    """ValueError where an 8-bit specialisation cannot be: B of another kind (FP8 mixes
    e4m3 and e5m2 only), an unknown scaling, or an exact int32 C with an epilogue."""
    b_dtype = spec.b_dtype or spec.dtype
    if b_dtype not in EIGHT_BIT or (b_dtype == "int8") != (spec.dtype == "int8"):
        raise ValueError(f"a is {spec.dtype} and b is {b_dtype}: FP8 formats mix with each "
                         "other only, int8 with int8")
    for name in ("scale_a", "scale_b"):
        if getattr(spec, name) not in SCALINGS:
            raise ValueError(f"{name} is applied as one of {', '.join(SCALINGS)}, not "
                             f"{getattr(spec, name)!r}")
    if spec.c_dtype == "int32" and (spec.bias or spec.read_c or spec.activation != "none"
                                    or (spec.scale_a, spec.scale_b) != ("none", "none")):
        raise ValueError(
            "an int8 product stored as int32 is the exact sums, with no epilogue: for "
            "scales, bias, activation or beta, store it as float32, bfloat16 or float16 "
            "(out_dtype=...)")


def check_spec(spec: Spec) -> None:
    """ValueError where ``spec`` cannot be compiled whatever the variant: an unknown
    activation, an output its inputs are not stored as, a second dtype or scales for
    inputs other than 8-bit ones (and the 8-bit rules, :func:`check_eight_bit_spec`)."""
    if spec.activation not in ACTIVATIONS:
        raise ValueError(
            f"unknown activation {spec.activation!r}: choose one of {', '.join(ACTIVATIONS)}"
        )
    allowed = EIGHT_BIT_OUTPUTS.get(spec.dtype) or (
        (spec.dtype, UNROUNDED_OUTPUT) if spec.dtype in SIXTEEN_BIT else (spec.dtype,))
    if spec.c_dtype not in allowed:
        raise ValueError(f"a {spec.dtype} product is stored as {' or '.join(allowed)}, "
                         f"not {spec.c_dtype}")
    if spec.dtype in EIGHT_BIT:
        check_eight_bit_spec(spec)
    elif (spec.b_dtype or spec.dtype) != spec.dtype or (spec.scale_a, spec.scale_b) != (
            "none", "none"):
        raise ValueError(f"a {spec.dtype} product has one dtype and no scales")
