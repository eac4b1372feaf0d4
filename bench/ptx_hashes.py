"""The PTX of the ladder's kernels, hashed, to show an edit of a template changed no code.

For every rung (or those named), every candidate point and its defaults (and each
TMA_STORE where the rung has one), up to three of its dtypes, every layout it reads, each
flag on and off, and the epilogue plain and full (bias, activation, C read): the
template rendered and compiled to PTX by NVRTC (no GPU needed), one process a
specialisation (several compiles in one process have given PTX that differed run to
run), and the PTX's SHA-256. A specialisation the registry refuses (a constraint, an
8-bit product's output) is recorded as refused, with no hash.

    python bench/ptx_hashes.py --json before.json            # then edit the templates
    python bench/ptx_hashes.py --json after.json --compare before.json
    python bench/ptx_hashes.py --variants wgmma,wgmma_8bit --json wgmma.json

With ``--sass`` the hash is of the machine code instead: the PTX assembled by ptxas (the
CUDA toolkit's, found on PATH) into a cubin for sm_90a or sm_90. PTX can differ where the
machine code does not (two operands of an ``or`` in the other order, say); identical
cubins show that an edit changed no instruction the GPU runs.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tqdm import tqdm  # noqa: E402

from xgemm import get_variant  # noqa: E402
from xgemm.registry import variants  # noqa: E402
from xgemm.specs import EIGHT_BIT, Spec  # noqa: E402


def specialisations(names: list[str]) -> list[dict]:
    """The (variant, parameters, spec) of each specialisation to hash, as JSON objects."""
    found: dict[str, dict] = {}
    for name in names:
        v = get_variant(name)
        points = [dict(v.defaults)] + [{**v.defaults, **c} for c in v.candidates]
        if "TMA_STORE" in v.defaults:
            points += [{**v.defaults, "TMA_STORE": t} for t in (0, 1, 2)]
        for p, dtype in itertools.product(points, v.dtypes[:3]):
            a_layouts, b_layouts = v.layouts(dtype)
            for a, b, flags, full in itertools.product(
                    a_layouts, b_layouts, itertools.product((True, False), repeat=len(v.flags)),
                    (False, True)):
                spec = {"dtype": dtype, "a_col": a == "col", "b_col": b == "col",
                        "flags": sorted([f, on] for f, on in zip(v.flags, flags, strict=True))}
                if full:
                    spec.update(bias=True, activation="relu", read_c=True)
                if dtype in EIGHT_BIT:
                    spec["out_dtype"] = "bfloat16"
                item = {"variant": name, "params": p, "spec": spec}
                found.setdefault(json.dumps(item, sort_keys=True), item)
    return list(found.values())


def ptx_hash(item: dict, sass: bool = False) -> str:
    """The SHA-256 of one specialisation's PTX (compiled in this process), or with
    ``sass`` of the cubin ptxas assembles from it; or why not."""
    from cuda.bindings import nvrtc

    from xgemm.compile import nvrtc_options

    v = get_variant(item["variant"])
    spec = Spec(**{k: tuple(tuple(f) for f in x) if k == "flags" else x
                   for k, x in item["spec"].items()})
    try:
        source = v.source(v.resolve(item["params"], spec.dtype), spec)
    except ValueError as refused:
        return f"refused: {refused}"
    arch = "compute_90a" if v.target == "sm_90a" else "compute_90"
    _, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{v.kernel_name}.cu".encode(), 0, [],
                                       [])
    options = [o.encode() for o in (*nvrtc_options(), f"--gpu-architecture={arch}")]
    try:
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return f"failed: {status}"
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    if sass:
        return hashlib.sha256(assembled(ptx.rstrip(b"\0 "), v.target)).hexdigest()
    return hashlib.sha256(ptx).hexdigest()


def assembled(ptx: bytes, target: str) -> bytes:
    """The cubin ptxas makes of ``ptx`` for ``target`` (sm_90a, else sm_90)."""
    ptxas = shutil.which("ptxas")  # (main checked it is there)
    with tempfile.TemporaryDirectory() as where:
        source, cubin = Path(where) / "k.ptx", Path(where) / "k.cubin"
        source.write_bytes(ptx)
        subprocess.run([ptxas, f"--gpu-name={'sm_90a' if target == 'sm_90a' else 'sm_90'}",
                        str(source), "-o", str(cubin)], check=True, capture_output=True)
        return cubin.read_bytes()


def in_a_process(item: dict, sass: bool = False) -> tuple[str, str]:
    out = subprocess.run([sys.executable, __file__, "--one", json.dumps(item),
                          *(["--sass"] if sass else [])], capture_output=True, text=True)
    result = out.stdout.strip() or f"failed: {out.stderr.strip().splitlines()[-1:]}"
    return json.dumps(item, sort_keys=True), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", help="comma-separated rungs (default: every rung)")
    parser.add_argument("--json", help="write {specialisation: hash} here")
    parser.add_argument("--compare", help="a file an earlier run wrote: list what differs")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sass", action="store_true",
                        help="hash the cubin ptxas assembles, not the PTX")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(ptx_hash(json.loads(args.one), args.sass))
        return
    if args.sass and shutil.which("ptxas") is None:  # once, not in each process
        raise SystemExit("--sass needs ptxas (the CUDA toolkit) on PATH")
    names = args.variants.split(",") if args.variants else variants()
    items = specialisations(names)
    with ThreadPoolExecutor(args.jobs) as pool:
        hashes = dict(tqdm(pool.map(lambda item: in_a_process(item, args.sass), items),
                           total=len(items), desc="SASS" if args.sass else "PTX"))
    compiled = sum(not h.startswith(("refused", "failed")) for h in hashes.values())
    print(f"{len(hashes)} specialisations, {compiled} compiled")
    if args.json:
        Path(args.json).write_text(json.dumps(hashes, indent=0, sort_keys=True))
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        differ = [k for k in hashes if k in before and hashes[k] != before[k]]
        for key in differ:
            print("differs:", key)
        print(f"{len(differ)} of {sum(k in before for k in hashes)} compared differ")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
