"""TMA tensor maps: how the copy engine of an sm_90 GPU finds a tile of a matrix.

A tensor map describes a strided array in global memory (its base, up to five dimensions
and their byte strides) and the box one copy brings into shared memory, with its swizzle.
The CUDA driver encodes it (``cuTensorMapEncodeTiled``) on the host; the kernel takes the
128 bytes by value. CuPy wraps no tensor-map call, so this module calls the driver's C
entry point through ctypes: the driver is there whenever a GPU is, and nothing else is
needed.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

import numpy as np

from .expressions import cdiv
from .specs import DTYPES

#: CUtensorMapDataType values, by NumPy dtype name.
DATA_TYPES = {"float16": 6, "float32": 7, "bfloat16": 9, "int32": 3,
              "uint8": 0, "int8": 0}  # 8-bit operands: TMA moves bytes (UINT8) whatever they hold
_SWIZZLE_NONE = 0        # CU_TENSOR_MAP_SWIZZLE_NONE: the box's lines as they lie
_SWIZZLE_128B = 3        # CU_TENSOR_MAP_SWIZZLE_128B
#: CU_TENSOR_MAP_L2_PROMOTION_L2_128B and _256B, by the bytes promoted.
_L2_PROMOTION = {128: 2, 256: 3}
_INTERLEAVE_NONE = 0
_OOB_FILL_ZEROS = 0      # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: outside the array reads as 0
#: CUDA_ERROR_INVALID_CONTEXT: a thread that has made no CUDA runtime call has no context
INVALID_CONTEXT = 201
#: What TMA needs of a global array: base address and every stride in multiples of this.
ALIGNMENT = 16
#: Bytes of a row of a box swizzled in 128-byte mode, as the Hopper rungs' boxes of C are.
BOX_BYTES = 128
#: The line pitch TMA reads fastest, in bytes: a box's 128-byte line that starts 16 bytes
#: past a multiple of 128 spans two of L2's lines. On the H100, rung 14 ran 1520 x 6904 x
#: 9408:TN in 445 us on lines of 1520 and 6904 values and in 291 us on the same lines laid
#: 1536 and 6912 values apart (cuBLAS: 253 us either way); copies padded for TMA are laid
#: out at this pitch.
FAST_PITCH = 128


def padded_line(values: int, itemsize: int) -> int:
    """The values a line of ``values`` items is padded to in a copy for TMA: whole
    ``FAST_PITCH`` bytes, or whole 16 where the line is shorter than that (a copy at 128
    would be mostly padding).

    >>> padded_line(685, 2), padded_line(704, 2), padded_line(27, 2)
    (704, 704, 32)
    """
    unit = FAST_PITCH if values * itemsize >= FAST_PITCH else ALIGNMENT
    return cdiv(values * itemsize, unit) * unit // itemsize


class NoContextError(RuntimeError):
    """The driver found no current CUDA context on this thread (one that has made no CUDA
    runtime call yet): make one current (any runtime call does) and encode again."""


@functools.cache
def _encode():
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise RuntimeError(f"TMA tensor maps need the CUDA driver (libcuda.so.1): {exc}") from None
    encode = driver.cuTensorMapEncodeTiled
    encode.restype = ctypes.c_int
    encode.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p,
                       ctypes.POINTER(u64), ctypes.POINTER(u64), ctypes.POINTER(u32),
                       ctypes.POINTER(u32), ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int]
    return encode


def l2_promotion(k_major: bool) -> int:
    """The bytes a map of an operand promotes to L2 as TMA reads it: 256 where its lines run
    along K (the next phase's 128 bytes of each line come with this one's), 128 where they
    run along M or N. 256 on lines along M or N ran 504 x 1012 x 12454:TN 1.13x slower and
    1520 x 6904 x 9408:TN 1.17x; on lines along K, 128 x 18944 x 3584:NT and 128 x 4096 x
    14336:NT 0.96x the time (evidence/l2_promotion_*.txt in bench/results/h200).

    >>> l2_promotion(True), l2_promotion(False)
    (256, 128)
    """
    return 256 if k_major else 128


def tensor_map(address: int, dtype: str, dims: Sequence[int], strides: Sequence[int],
               box: Sequence[int], swizzled: bool = True, promote: int = 128) -> np.ndarray:
    """The tensor map of an array at device ``address``: ``dims`` elements per dimension,
    innermost (contiguous) first; ``strides`` the bytes between consecutive indices of
    every dimension but the first; ``box`` the elements one copy brings, per dimension.
    Swizzled in 128-byte rows, zeros outside the array; ``promote`` bytes brought into L2
    around each line read (128 or 256: :func:`l2_promotion`).

    Returns a NumPy array of one 128-byte element, which CuPy passes to a kernel by value
    (a ``const __grid_constant__`` parameter of 128 bytes). RuntimeError with the driver's
    code if the driver refuses (e.g. an address or stride not a multiple of 16 bytes).

    A row-major 4096 x 4096 bfloat16 matrix at ``ptr``, in boxes of 128 rows of 64:

    >>> tensor_map(ptr, "bfloat16", (4096, 4096, 1), (8192, 2**25), (64, 128, 1))  # doctest: +SKIP
    """
    rank = len(dims)
    if not (len(strides) == rank - 1 and len(box) == rank):
        raise ValueError(f"{rank} dims need {rank - 1} strides and {rank} box sizes")
    raw = np.zeros(128 + 64, dtype=np.uint8)   # the driver wants the map 64-byte aligned
    start = -raw.ctypes.data % 64
    out = raw[start:start + 128]
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    code = _encode()(
        out.ctypes.data, DATA_TYPES[dtype], rank, address,
        (u64 * rank)(*dims), (u64 * (rank - 1))(*strides), (u32 * rank)(*box),
        (u32 * rank)(*([1] * rank)), _INTERLEAVE_NONE,
        _SWIZZLE_128B if swizzled else _SWIZZLE_NONE, _L2_PROMOTION[promote],
        _OOB_FILL_ZEROS)
    if code == INVALID_CONTEXT:
        raise NoContextError("cuTensorMapEncodeTiled: this thread has no current CUDA context")
    if code != 0:
        raise RuntimeError(
            f"cuTensorMapEncodeTiled refused (CUresult {code}) a {dtype} map of dims {tuple(dims)},"
            f" byte strides {tuple(strides)}, box {tuple(box)} at address {address:#x}")
    return out.view(np.dtype((np.void, 128)))


def eighth_maps(dtype: str, itemsize: int, inner: int, lines: int, ld: int, batch_stride: int,
                count: int, box: tuple[int, int]) -> tuple[tuple | None, ...]:
    """The geometries (:func:`tensor_map`'s arguments after the address) of the eight maps
    rung 34 reads one 16-bit operand through, at any leading dimension: its lines (rows,
    or k rows) of ``inner`` values lie ``ld`` apart. Map r holds lines r, r + 8, ..., 8 x
    ld values apart (16 x ld bytes: a stride TMA takes whatever ld is); its first
    coordinate counts values from the operand's start, so line r begins at r x ld, and it
    ends where line r does, so that TMA fills zeros past each line and past the operand's
    last. ``box``: values of each line by lines, unswizzled. None for a residue with no
    line (fewer than 8). ``count`` matrices ``batch_stride`` values apart (0: one
    matrix). :func:`eighths_at` places them at an address.

    >>> eighth_maps("bfloat16", 2, 5492, 7181, 5492, 0, 1, (200, 16))[3][1]
    (21968, 898, 1)
    """
    stride = batch_stride if batch_stride else 8 * ld * cdiv(lines, 8)
    depth = count if batch_stride else 1
    return tuple(
        (dtype, (r * ld + inner, cdiv(lines - r, 8), depth),
         (8 * ld * itemsize, stride * itemsize), (*box, 1), False)
        if r < lines else None for r in range(8))


def eighths_at(address: int, geometries: tuple[tuple | None, ...]
               ) -> tuple[int, tuple[tuple | None, ...]]:
    """Where :func:`eighth_maps` of an operand at device ``address`` start, and their
    geometries there: at the 16 bytes the operand starts in (TMA's maps start on 16
    bytes), each first coordinate reaching ``skip`` values further, the operand's offset
    in those 16 bytes (which its kernel reads off its address).

    >>> eighths_at(0x1006, (("bfloat16", (37, 9, 1), (736, 6624), (72, 8, 1), False),))
    (4096, (('bfloat16', (40, 9, 1), (736, 6624), (72, 8, 1), False),))
    """
    offset = address % ALIGNMENT
    return address - offset, tuple(
        None if g is None else (g[0], (g[1][0] + offset // DTYPES[g[0]].itemsize, *g[1][1:]),
                                *g[2:])
        for g in geometries)
