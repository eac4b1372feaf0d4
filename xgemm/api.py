"""``xgemm.matmul`` and ``xgemm.source``: check everything, then compile and launch."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .compile import get_kernel
from .registry import Variant, get_variant

if TYPE_CHECKING:
    import cupy

#: Picks the variant and parameters per call: tuned ones where ``xgemm.tune`` ran, else a heuristic.
AUTO = "auto"
#: The variant ``matmul`` uses when none is named.
DEFAULT_VARIANT = AUTO

_INT_MAX = 2**31 - 1  # the kernels take int sizes and leading dimensions


@dataclass(frozen=True)
class _Meta:
    """What can be learnt about an operand without touching the GPU."""

    shape: tuple[int, ...]
    dtype: np.dtype


def _meta(x: Any, name: str) -> _Meta | None:
    """Shape and dtype of ``x``, or None when only a conversion can tell (DLPack objects).

    Raises TypeError for host arrays and for objects that are no GPU array at all.
    """
    if isinstance(x, np.ndarray) or not _on_gpu(x) and (
        hasattr(x, "__array_interface__") or hasattr(x, "__dlpack_device__")
    ):
        raise TypeError(
            f"{name} is a host (CPU) array of shape {getattr(x, 'shape', '?')}; xgemm multiplies "
            f"GPU arrays: move it first with cupy.asarray({name}) (or {name}.cuda() for a "
            "PyTorch tensor)"
        )
    module = type(x).__module__.split(".")[0]
    if module == "cupy":
        return _Meta(tuple(x.shape), np.dtype(x.dtype))
    if hasattr(x, "__cuda_array_interface__") and not hasattr(x, "__dlpack__"):
        cai = x.__cuda_array_interface__
        return _Meta(tuple(cai["shape"]), np.dtype(cai["typestr"]))
    if hasattr(x, "__dlpack__"):
        return None
    raise TypeError(
        f"{name} must be a GPU array (a CuPy array, or an object with __cuda_array_interface__ "
        f"or __dlpack__ such as a PyTorch CUDA tensor), got {type(x).__name__}"
    )


def _on_gpu(x: Any) -> bool:
    if hasattr(x, "__dlpack_device__"):
        return int(x.__dlpack_device__()[0]) in (2, 13)  # kDLCUDA, kDLCUDAManaged
    return hasattr(x, "__cuda_array_interface__")


def _check_meta(a: _Meta, b: _Meta, variant: str, dtypes: tuple[str, ...]) -> None:
    for name, m in (("a", a), ("b", b)):
        if len(m.shape) != 2:
            raise ValueError(
                f"{name} has shape {m.shape} ({len(m.shape)}-D); xgemm.matmul multiplies 2-D "
                "matrices: reshape it, or use cupy.matmul for batched and 1-D operands"
            )
        if m.dtype.name not in dtypes:
            raise TypeError(
                f"{name} has dtype {m.dtype.name}; variant {variant!r} multiplies "
                f"{', '.join(dtypes)}: convert with {name}.astype('float32'), "
                "or use cupy.matmul"
            )
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"inner dimensions differ: a is {a.shape} and b is {b.shape}, and a @ b needs "
            f"a.shape[1] == b.shape[0] ({a.shape[1]} != {b.shape[0]})"
        )
    for name, m in (("a", a), ("b", b)):
        if max(m.shape) > _INT_MAX:
            raise ValueError(f"{name} has shape {m.shape}; xgemm's kernels index with 32-bit ints")


def _to_cupy(x: Any) -> cupy.ndarray:
    import cupy

    if isinstance(x, cupy.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        return cupy.from_dlpack(x)
    return cupy.asarray(x)  # __cuda_array_interface__: a view, no copy


def _leading_dim(x: cupy.ndarray, order: str) -> int | None:
    """The leading dimension (in elements) to read ``x`` in place as a row-major ("row")
    or column-major ("col") matrix, or None when its strides allow neither."""
    item = x.itemsize
    inner, outer = (1, 0) if order == "row" else (0, 1)
    if x.size == 0:
        return max(x.shape[inner], 1)  # nothing is read: any leading dimension will do
    if x.shape[inner] > 1 and x.strides[inner] != item:
        return None
    if x.shape[outer] <= 1:
        return max(x.shape[inner], 1)
    stride = x.strides[outer]
    if stride <= 0 or stride % item or stride // item < x.shape[inner]:
        return None
    return stride // item


def _operand(x: cupy.ndarray, order: str) -> tuple[cupy.ndarray, int]:
    """``x`` and its leading dimension in the layout a kernel reads. Strides that layout
    cannot express (a column-major A, a step slice, negative strides) cost one copy."""
    import cupy

    ld = _leading_dim(x, order)
    if ld is None:
        x = cupy.ascontiguousarray(x) if order == "row" else cupy.asfortranarray(x)
        ld = _leading_dim(x, order)
    if ld > _INT_MAX:
        raise ValueError(f"leading dimension {ld} does not fit the kernels' 32-bit ints")
    return x, ld


@functools.cache
def _device_limits(device: int) -> tuple[int, int]:
    import cupy

    attrs = cupy.cuda.Device(device).attributes
    return attrs["MaxThreadsPerBlock"], attrs["MaxSharedMemoryPerBlock"]


@dataclass
class Launch:
    """One product, checked and laid out, ready to compile and run: what ``matmul`` does
    after its checks. ``prepare`` makes one; calling it launches the kernel."""

    variant: Variant
    params: dict[str, int]
    dtype: str
    flags: dict[str, bool]
    device: int
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple
    result: Any  # the array returned
    staging: Any = None  # where the kernel writes when ``out`` overlaps an input

    def kernel(self):
        """The compiled kernel (compiled now unless the in-process cache has it)."""
        import cupy

        with cupy.cuda.Device(self.device):
            return get_kernel(self.variant.name, self.params, self.dtype, self.flags,
                              self.device)

    def __call__(self):
        import cupy

        if self.grid:  # an empty output launches (and compiles) nothing
            kernel = self.kernel()
            with cupy.cuda.Device(self.device):
                kernel(self.grid, self.block, self.args)
        if self.staging is not None:
            self.result[...] = self.staging
        return self.result


def prepare(a: Any, b: Any, variant: str = DEFAULT_VARIANT, out: cupy.ndarray | None = None,
            **params: int) -> Launch:
    """Check the operands and parameters and lay the launch out, without running it.

    ``matmul(a, b, ...)`` is ``prepare(a, b, ...)()``. Useful to time or inspect a call:

    >>> import cupy as cp, xgemm  # doctest: +SKIP
    >>> launch = xgemm.prepare(cp.ones((64, 32), "f"), cp.ones((32, 16), "f"))  # doctest: +SKIP
    >>> launch.variant.name, launch.grid  # doctest: +SKIP
    """
    auto = variant == AUTO
    if auto:
        if params:
            raise ValueError(
                f"variant='auto' picks its own parameters, so {sorted(params)} cannot be given; "
                "name a variant to set them (xgemm.variants() lists the names)"
            )
        v, p = None, {}
    else:
        v = get_variant(variant)
        p = v.resolve(params)
    dtypes = v.dtypes if v else ("float32",)
    metas = (_meta(a, "a"), _meta(b, "b"))
    if None not in metas:
        _check_meta(*metas, variant, dtypes)  # before any conversion: needs no GPU

    import cupy

    a, b = _to_cupy(a), _to_cupy(b)
    _check_meta(_Meta(a.shape, a.dtype), _Meta(b.shape, b.dtype), variant, dtypes)
    device = a.device.id
    if b.device.id != device:
        raise ValueError(f"a is on GPU {device} and b on GPU {b.device.id}; move one of them")
    (m, k), n = a.shape, b.shape[1]
    if auto:
        from .tuning import choose

        name, p = choose(m, n, k, a.dtype.name, device)
        v = get_variant(name)

    if out is not None:
        _check_out(out, (m, n), a.dtype, device)
    if m == 0 or n == 0:
        result = out if out is not None else cupy.empty((m, n), dtype=a.dtype)
        return Launch(v, p, a.dtype.name, {}, device, (), (), (), result)

    max_threads, max_smem = _device_limits(device)
    threads, smem = v.threads_per_block(p), v.shared_memory(p)
    if threads > max_threads or smem > max_smem:
        raise ValueError(
            f"variant {v.name!r} with {p} needs {threads} threads and {smem} bytes of shared "
            f"memory per block; GPU {device} allows {max_threads} and {max_smem}"
        )
    grid, block = v.launch(p, m, n)

    a, lda = _operand(a, "row")
    b, ldb = _operand(b, v.b_order)
    overlaps = out is not None and (cupy.may_share_memory(out, a) or cupy.may_share_memory(out, b))
    c = cupy.empty((m, n), dtype=a.dtype) if out is None or overlaps else out
    ldc = _leading_dim(c, "row")
    aligned = (all(x.data.ptr % 16 == 0 for x in (a, b, c)) and k % 4 == 0 and n % 4 == 0
               and lda % 4 == 0 and ldb % 4 == 0 and ldc % 4 == 0)
    flags = {f: {"aligned": aligned}[f] for f in v.flags}
    args = (a, b, c, np.int32(m), np.int32(n), np.int32(k),
            np.int32(lda), np.int32(ldb), np.int32(ldc))
    result = out if out is not None else c
    return Launch(v, p, a.dtype.name, flags, device, grid, block, args, result,
                  c if c is not result else None)


def matmul(a: Any, b: Any, variant: str = DEFAULT_VARIANT, out: cupy.ndarray | None = None,
           **params: int) -> cupy.ndarray:
    """``a @ b`` for 2-D float32 GPU matrices, computed by one of xgemm's kernels.

    Args:
        a: an (M, K) CuPy array, or any GPU array with ``__cuda_array_interface__`` or
            ``__dlpack__`` (a PyTorch CUDA tensor): read in place, no copy.
        b: a (K, N) GPU array, likewise.
        variant: a name from :func:`xgemm.variants`, or "auto" (the default): the variant
            and parameters that ``xgemm.tune`` found fastest for this GPU and a shape like
            this one, or, for shapes never tuned, the heuristic of :func:`xgemm.tune.heuristic`.
        out: optional (M, N) float32 CuPy array on the same device, written in place.
        **params: the variant's tile parameters (``tile=16``, ``BM=64``...); those left
            out take the variant's defaults.

    Returns:
        The (M, N) product as a CuPy array (``out`` itself when given).

    Operands are read in place when the kernel can address them with a leading
    dimension: a row-major A (slices of a larger array included), and B row-major, or
    column-major (a transposed view ``w.T``) for ``transposed_b``. Any other layout is
    copied once to the one the kernel reads.

    Every check happens before anything is compiled or launched: unknown variants and
    parameters and broken constraints raise ValueError, host arrays and wrong dtypes
    TypeError, mismatched shapes ValueError.

    Example:
        >>> import cupy as cp, xgemm
        >>> a = cp.random.standard_normal((1000, 700), dtype=cp.float32)
        >>> b = cp.random.standard_normal((700, 300), dtype=cp.float32)
        >>> c = xgemm.matmul(a, b, variant="tiled", tile=16)
        >>> bool(cp.allclose(c, a @ b, rtol=1e-4, atol=1e-3))
        True
    """
    return prepare(a, b, variant, out, **params)()


def _check_out(out: Any, shape: tuple[int, int], dtype: np.dtype, device: int) -> None:
    import cupy

    if not isinstance(out, cupy.ndarray):
        raise TypeError(f"out must be a CuPy array, got {type(out).__name__}")
    if out.shape != shape:
        raise ValueError(f"out has shape {out.shape}; a @ b has shape {shape}")
    if out.dtype != dtype:
        raise TypeError(f"out has dtype {out.dtype}; a @ b has dtype {dtype}")
    if out.device.id != device:
        raise ValueError(f"out is on GPU {out.device.id} and the operands on GPU {device}")
    if _leading_dim(out, "row") is None:
        raise ValueError(
            f"out has strides {out.strides}: the kernels write rows with unit column stride; "
            "pass a C-contiguous out (or a row slice of one), or out=None"
        )


def source(variant: str, dtype: str = "float32", **params: int | bool) -> str:
    """The CUDA C that ``variant`` compiles for ``params`` (defaults for the rest).

    Boolean specialisations such as ``aligned`` of ``vectorized`` default to True.

    Example:
        >>> import xgemm
        >>> src = xgemm.source("coarse2d", BM=128, BN=128, BK=16, TM=8, TN=8)
        >>> "constexpr int BM = 128, BN = 128, BK = 16, TM = 8, TN = 8;" in src
        True
    """
    v = get_variant(variant)
    flags = {f: bool(params.pop(f, True)) for f in v.flags}
    return v.source(v.resolve(params), dtype, **flags)
