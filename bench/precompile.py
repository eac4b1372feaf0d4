"""Compile, in parallel threads, the kernels the GPU test suite needs into CuPy's on-disk
cache, so that the suite loads them instead of compiling them one after another: every
point of every variant's space (float32, or the variant's first dtype) with each flag
setting, and at the defaults every dtype x layout x flag, and every epilogue the tests
use on the first layout; for the 8-bit rung, its points in int8 and e4m3 and the compile
check's specialisations. With --candidates, auto's candidate points of the variants named
instead, at every dtype and layout (what a calibration run or add_candidates times).

    python3 bench/precompile.py [variant ...]   # all variants, or only those named
    python3 bench/precompile.py --candidates skinny_ring
"""

import argparse
import itertools
import os
import time
from concurrent.futures import ThreadPoolExecutor

import cupy

import xgemm
from xgemm.compile import get_kernel
from xgemm.specs import ACTIVATIONS, EIGHT_BIT, Spec


def candidate_jobs(names):
    for name in names:
        v = xgemm.get_variant(name)
        for dtype in v.dtypes:
            for point, a_layout, b_layout, flags in itertools.product(
                    v.candidate_points(dtype), *v.layouts(dtype), v.flag_values()):
                yield name, v.resolve(point, dtype), Spec(
                    dtype, a_layout == "col", b_layout == "col",
                    flags=tuple(sorted(flags.items())))


def jobs(names):
    for name in names or xgemm.variants():
        v = xgemm.get_variant(name)
        first = dict(a_col=v.a_layouts[0] == "col", b_col=v.b_layouts[0] == "col")
        flag_sets = [tuple(sorted(f.items())) for f in v.flag_values()]
        home = "float32" if "float32" in v.dtypes else v.dtypes[0]  # as tests/test_gpu.py
        if set(v.dtypes) <= set(EIGHT_BIT):  # as tests/test_eight_bit.py: int8 and e4m3
            for dtype in v.dtypes[:2]:       # at every point, then every dtype's compile check
                for point, flags in itertools.product(v.points(dtype), flag_sets):
                    yield name, point, Spec(dtype, **first, flags=flags)
            for dtype in v.dtypes:
                for spec in v.specs(dtype):
                    yield name, v.resolve({}, dtype), spec
            continue
        for point, flags in itertools.product(v.points(home), flag_sets):
            yield name, point, Spec(home, **first, flags=flags)
        for dtype in v.dtypes:
            defaults = v.resolve({}, dtype)
            if dtype in EIGHT_BIT:  # K-major only: tests/test_eight_bit.py's own products
                yield from ((name, defaults, spec) for spec in v.specs(dtype))
                continue
            for a_layout, b_layout, flags in itertools.product(v.a_layouts, v.b_layouts,
                                                               flag_sets):
                yield name, defaults, Spec(dtype, a_layout == "col", b_layout == "col",
                                           flags=flags)
            for flags, activation, bias, read_c in itertools.product(
                    flag_sets, ACTIVATIONS, (False, True), (False, True)):
                yield name, defaults, Spec(dtype, **first, bias=bias, activation=activation,
                                           read_c=read_c, flags=flags)


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("names", nargs="*", help="variants (default: all)")
parser.add_argument("--candidates", action="store_true",
                    help="auto's candidate points of the variants named, every dtype and layout")
args = parser.parse_args()
device = cupy.cuda.Device().id
found = candidate_jobs(args.names) if args.candidates else jobs(args.names)
todo = list({(name, tuple(p.items()), spec): (name, p, spec) for name, p, spec in found}.values())
start = time.perf_counter()
with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    list(pool.map(lambda job: get_kernel(*job, device), todo))
print(f"precompiled {len(todo)} kernels in {time.perf_counter() - start:.0f} s")
