"""Bad input is refused with a clear error before anything compiles or launches.
These need no GPU: stand-in operands describe themselves through the CUDA array
interface or DLPack, and nothing ever reads their (fake) memory."""

import re

import numpy as np
import pytest
from conftest import FakeGpuArray

import xgemm


class FakeHostTensor:
    """A DLPack tensor on the CPU (device type 1), like a PyTorch CPU tensor."""

    shape = (4, 4)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("xgemm must refuse before converting")


@pytest.fixture(autouse=True)
def no_compile(monkeypatch, no_cupy):
    """Any attempt to compile, launch or even import CuPy fails the test: errors must come
    first."""

    def refuse(*args, **kwargs):
        raise AssertionError("compiled before validating")

    monkeypatch.setattr("xgemm.plan.get_kernel", refuse)


def f32(*shape):
    return FakeGpuArray(shape)


def test_host_numpy_arrays():
    a = np.ones((4, 3), np.float32)
    with pytest.raises(TypeError, match=r"a is a host \(CPU\) array .*cupy.asarray\(a\)"):
        xgemm.matmul(a, f32(3, 2))
    with pytest.raises(TypeError, match=r"b is a host \(CPU\) array"):
        xgemm.matmul(f32(4, 3), a.T)


def test_host_dlpack_tensor():
    with pytest.raises(TypeError, match=r"b is a host \(CPU\) array .*b.cuda\(\)"):
        xgemm.matmul(f32(4, 4), FakeHostTensor())


def test_not_an_array():
    for thing in (None, [[1.0]], 3.0, "a"):
        with pytest.raises(TypeError, match="must be a GPU array"):
            xgemm.matmul(thing, f32(1, 1))


def test_inner_dimensions():
    with pytest.raises(ValueError, match=r"a is \(5, 3\) and b is \(4, 2\).*3 != 4"):
        xgemm.matmul(f32(5, 3), f32(4, 2))


# Pairs numpy.matmul accepts, and pairs it refuses: xgemm agrees on both, before any GPU work.
VALID = [((7,), (7,)), ((7,), (7, 5)), ((6, 7), (7,)), ((3, 6, 7), (7,)), ((7,), (3, 7, 5)),
         ((8, 3, 9), (9, 2)), ((3, 9), (4, 9, 2)), ((2, 1, 4, 5), (3, 5, 6)),
         ((0, 4, 5), (5, 6)), ((4, 0), (0, 3)), ((0,), (0,)), ((1, 1, 1), (1, 1))]
INVALID = [((), (3,)), ((3,), ()), ((3,), (4,)), ((2, 3), (4, 5)), ((5,), (2, 4, 3)),
           ((2, 3, 4), (3, 4, 5)), ((2, 4, 5), (3, 5, 6)), ((4, 5), (4,))]


@pytest.mark.parametrize("a_shape, b_shape", VALID)
def test_shapes_like_numpy(a_shape, b_shape):
    from xgemm.checks import matmul_shapes

    expected = np.matmul(np.ones(a_shape), np.ones(b_shape)).shape
    assert matmul_shapes(a_shape, b_shape).out == expected


@pytest.mark.parametrize("a_shape, b_shape", INVALID)
def test_refused_shapes_like_numpy(a_shape, b_shape):
    with pytest.raises(ValueError):
        np.matmul(np.empty(a_shape), np.empty(b_shape))
    with pytest.raises(ValueError, match=re.escape(f"{a_shape}") + "|0-D"):
        xgemm.matmul(f32(*a_shape), f32(*b_shape))


@pytest.mark.parametrize("typestr, name, hint", [("<i4", "int32", "integer"),
                                                 ("<c8", "complex64", "complex"),
                                                 ("|b1", "bool", "boolean")])
def test_integer_and_complex_point_to_cupy(typestr, name, hint):
    with pytest.raises(TypeError, match=rf"b has dtype {name}; xgemm multiplies float32, "
                                        rf"float64, float16, bfloat16, and 8-bit operands .*; "
                                        rf"for other {hint} products use cupy.matmul"):
        xgemm.matmul(f32(3, 3), FakeGpuArray((3, 3), typestr))


def test_mixed_dtypes():
    with pytest.raises(TypeError, match="a has dtype float32 and b has dtype float64.*mix"):
        xgemm.matmul(f32(3, 3), FakeGpuArray((3, 3), "<f8"))


def test_a_variant_without_the_dtype():
    with pytest.raises(TypeError, match="'wmma' supports float16, bfloat16, not float32; "
                                        "for float32 use one of naive, coalesced"):
        xgemm.matmul(f32(4, 4), f32(4, 4), variant="wmma")
    from xgemm.registry import Variant

    v = Variant(name="f32_only", template="gemm/03_tiled.cu.j2", adds="", defaults={"tile": 8},
                space={"tile": [8]}, constraints=[], block=("tile", "tile"), grid=("1",),
                dtypes=("float32",))
    with pytest.raises(TypeError, match="'f32_only' supports float32, not float16; for "
                                        "float16 use one of naive, coalesced"):
        v.resolve({}, "float16")


def test_unknown_activation():
    with pytest.raises(ValueError, match="unknown activation 'rleu' .did you mean 'relu'"):
        xgemm.matmul(f32(2, 2), f32(2, 2), activation="rleu")


def test_out_and_c_together():
    with pytest.raises(ValueError, match="not both"):
        xgemm.prepare(f32(2, 2), f32(2, 2), out=f32(2, 2), c=f32(2, 2))


def test_layout_of():
    from xgemm.checks import Layout, layout_of

    f = 4
    assert layout_of((5, 3, 4), (48, 16, 4), f) == Layout(False, 4, 12)        # C-ordered batch
    assert layout_of((5, 3, 4), (0, 16, 4), f) == Layout(False, 4, 0)          # broadcast
    assert layout_of((5, 3, 4), (48, 4, 12), f) == Layout(True, 3, 12)         # swapaxes'd
    assert layout_of((3, 4), (16 * 9, 4), f) == Layout(False, 36, 0)           # row slice
    assert layout_of((3, 4), (16, 8), f) is None                               # column step
    assert layout_of((3, 4), (-16, 4), f) is None                              # reversed rows
    assert layout_of((2, 3, 3, 4), (48, 0, 16, 4), f) is None                  # no one stride
    assert layout_of((3, 4), (16, 4), f, ("col",)) is None
    assert layout_of((3, 4), (16, 4), f, ("row",), write=True) == Layout(False, 4, 0)
    assert layout_of((2, 3, 4), (0, 16, 4), f, ("row",), write=True) is None    # writes collide
    assert layout_of((4, 1), (4, 4), f, ("col",)) == Layout(True, 4, 0)        # a column


def test_unknown_variant_first():
    # the variant is checked before the operands, so even host arrays get this error
    with pytest.raises(ValueError, match="unknown variant 'tile'.*'tiled'"):
        xgemm.matmul(np.ones((2, 2)), np.ones((2, 2)), variant="tile")


def test_bad_parameters():
    with pytest.raises(ValueError, match="no parameter 'TILE'.*did you mean 'tile'"):
        xgemm.matmul(f32(2, 2), f32(2, 2), variant="tiled", TILE=16)
    with pytest.raises(ValueError, match=r"breaks: BN % TN == 0"):
        xgemm.matmul(f32(2, 2), f32(2, 2), variant="coarse2d", BN=64, TN=5)
    with pytest.raises(ValueError, match="threads per block 4096 <= 1024"):
        xgemm.matmul(f32(2, 2), f32(2, 2), variant="naive", block=64)


def test_unknown_precision_is_refused_first():
    a = np.ones((4, 4), np.float32)  # a host array: the precision is checked before that
    with pytest.raises(ValueError, match="unknown precision 'fp8': None .*, 'tf32' .* or 'tf32x3'"):
        xgemm.matmul(a, a, precision="fp8")


def test_output_dtype_rules():
    from xgemm.checks import output_dtype as _output_dtype

    half = np.empty(1, np.float16)
    single = np.empty(1, np.float32)
    assert _output_dtype("float16", None, None, "out") == "float16"
    assert _output_dtype("bfloat16", "float32", None, "out") == "float32"
    assert _output_dtype("float16", None, single, "out") == "float32"  # from out's dtype
    assert _output_dtype("float16", None, half, "out") == "float16"
    assert _output_dtype("float32", "float32", None, "out") == "float32"
    with pytest.raises(ValueError, match="a float16 product is stored as float16 or float32"):
        _output_dtype("float16", "float64", None, "out")
    with pytest.raises(ValueError, match="a float32 product is stored as float32$"):
        _output_dtype("float32", "float16", None, "out")
    with pytest.raises(TypeError, match="c has dtype float16 but out_dtype is 'float32'"):
        _output_dtype("float16", "float32", half, "c")


def test_the_compile_check_builds_a_float32_c_for_16_bit_inputs():
    v = xgemm.get_variant("mma")
    wide = [s for s in v.specs("float16") if s.out_dtype == "float32"]
    assert wide and all(s.bias and s.read_c for s in wide)
    assert not [s for s in v.specs("float32") if s.out_dtype]
    src = xgemm.source("mma", "float16", out_dtype="float32")
    assert "using TC = float;" in src and "using T = __half;" in src
    with pytest.raises(ValueError, match="stored as float32, not float16"):
        xgemm.source("tiled", "float32", out_dtype="float16")
