"""Whether two template folders compile to the same machine code: each named variant at its
defaults and first candidate point, in every layout pair it reads, rendered from both,
built with nvcc for sm_90a and disassembled (nvdisasm: the ``nvidia-cuda-nvdisasm`` wheel
or the CUDA toolkit's), compared instruction by instruction with addresses dropped. Where
a GPU suite ran on the first folder's templates, identical code carries its result over to
a change that only reworded or refactored them. No GPU needed:

    git archive 0349369 kernels | tar -x -C /tmp/before
    python bench/same_sass.py /tmp/before/kernels wgmma wgmma_rows wgmma_any_ld
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from template_ab import use  # noqa: E402  (the same switch of template folders)

import xgemm  # noqa: E402
from xgemm import compile as xcompile  # noqa: E402
from xgemm import render  # noqa: E402

NVDISASM = os.environ.get("NVDISASM") or shutil.which("nvdisasm") or "nvdisasm"
ADDRESS = re.compile(r"/\*[0-9a-f]+\*/")


def sources(before: str, name: str) -> list[tuple[str, str, str]]:
    """(label, source before, source now) of each build of variant ``name``."""
    v = xgemm.get_variant(name)
    dtype = "bfloat16" if "bfloat16" in v.dtypes else v.dtypes[0]
    a_layouts, b_layouts = v.layouts(dtype)
    points = [v.defaults, *v.candidate_points(dtype)[:1]]
    builds = []
    for i, (params, a, b) in enumerate(itertools.product(points, a_layouts, b_layouts)):
        pair = []
        for folder in (before, str(render.KERNELS_DIR)):
            use(folder)
            pair.append(
                xgemm.source(name, dtype, a_col=a == "col", b_col=b == "col", **dict(params))
            )
        builds.append((f"{name} {i} {a}/{b}", *pair))
    return builds


def machine_code(source: str, folder: str) -> str:
    """``source``'s SASS for sm_90a, one instruction a line, no addresses."""
    cu, cubin = Path(folder, "k.cu"), Path(folder, "k.cubin")
    cu.write_text(source)
    includes = [f"-I{d}" for d in xcompile.cuda_include_dirs()]
    subprocess.run(
        ["nvcc", "-arch=sm_90a", "-cubin", "-std=c++17", *includes, "-o", str(cubin), str(cu)],
        check=True,
        capture_output=True,
    )
    listing = subprocess.run(
        [NVDISASM, "-c", str(cubin)], check=True, capture_output=True, text=True
    ).stdout
    return "\n".join(
        ADDRESS.sub("", line).strip()
        for line in listing.splitlines()
        if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)
    )


def verdict(build: tuple[str, str, str]) -> str:
    label, before, now = build
    if before == now:
        return f"{label}: the same source"
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        old, new = machine_code(before, a), machine_code(now, b)
    if old == new:
        return f"{label}: the same SASS"
    return (
        f"{label}: SASS DIFFERS ({len(old.splitlines())} -> {len(new.splitlines())} instructions)"
    )


def main(before: str, names: list[str]) -> None:
    builds = [b for name in names for b in sources(before, name)]
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for line in pool.map(verdict, builds):
            print(line, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
