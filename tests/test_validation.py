"""Bad input is refused with a clear error before anything compiles or launches.
These need no GPU: stand-in operands describe themselves through the CUDA array
interface or DLPack, and nothing ever reads their (fake) memory."""

import re

import numpy as np
import pytest

import xgemm


class FakeGpuArray:
    """Looks like a GPU array to xgemm's checks; pointing at no memory at all."""

    def __init__(self, shape, typestr="<f4"):
        self.shape = shape
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (0, False), "strides": None, "version": 3,
        }


class FakeHostTensor:
    """A DLPack tensor on the CPU (device type 1), like a PyTorch CPU tensor."""

    shape = (4, 4)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("xgemm must refuse before converting")


@pytest.fixture(autouse=True)
def no_compile(monkeypatch):
    """Any attempt to compile or launch fails the test: errors must come first."""

    def refuse(*args, **kwargs):
        raise AssertionError("compiled before validating")

    monkeypatch.setattr("xgemm.api.get_kernel", refuse)


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


@pytest.mark.parametrize("thing", [None, [[1.0]], 3.0, "a"])
def test_not_an_array(thing):
    with pytest.raises(TypeError, match="must be a GPU array"):
        xgemm.matmul(thing, f32(1, 1))


def test_inner_dimensions():
    with pytest.raises(ValueError, match=r"a is \(5, 3\) and b is \(4, 2\).*3 != 4"):
        xgemm.matmul(f32(5, 3), f32(4, 2))


@pytest.mark.parametrize("shape", [(3,), (2, 3, 3), ()])
def test_not_2d(shape):
    with pytest.raises(ValueError, match=re.escape(f"a has shape {shape!r}") + ".*2-D"):
        xgemm.matmul(f32(*shape), f32(3, 3))


@pytest.mark.parametrize("typestr, name", [("<f8", "float64"), ("<f2", "float16"),
                                           ("<i4", "int32"), ("<c8", "complex64")])
def test_unsupported_dtype(typestr, name):
    with pytest.raises(TypeError, match=rf"b has dtype {name}; variant 'auto' multiplies "
                                        r"float32: convert with b.astype"):
        xgemm.matmul(f32(3, 3), FakeGpuArray((3, 3), typestr))


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
