"""What bounds rung 34 (``wgmma_any_ld``): its layout warps' instructions, or a cost per span
of the fetch, layout and consume chain whatever the work in it (docs/notes.md, stop 91)?
Kernel microseconds in turns, the L2 scrubbed, bf16, of rung 34 rendered from three template
folders: as it is; "const", whose layout warps store constants (their staging loads and
realignment gone, every barrier kept); and "half", which lays out every other span only.
The knockouts give wrong results: this times them, it checks nothing. Run from the
repository root on a GPU:

    python bench/any_ld_knockouts.py out.json

Each arm's launch is called once as it is prepared: a plan compiles its kernel on its
first call, from the template folder in use then.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Callable

import torch
from template_ab import use  # the same switch of template folders

import xgemm
from xgemm import render
from xgemm.tools import measuring

TEMPLATE = pathlib.Path("gemm", "34_wgmma_any_ld.cu.j2")
REALIGNED = "uint4 v = shift[j] ? bytes_from(lo[j], hi[j], shift[j]) : lo[j];"
EVERY_PHASE = "                    if (p >= count) break;"
KNOCKOUTS: dict[str, Callable[[str], str]] = {
    "const": lambda text: text.replace(REALIGNED, "uint4 v = make_uint4(j, chunk, 0, 0);"),
    "half": lambda text: text.replace(
        EVERY_PHASE, "                    if (p >= count || span % 2) break;"
    ),
}
# "half" skips a span's waits on its ring slots but not its arrivals: at SPAN 3 over a ring
# of 4 a slot's barrier then runs a phase ahead and the consumer waits for ever (H200,
# 89253a7); at SPAN 2 it ran. It is timed at spans below this only.
HALF_HANGS_FROM_SPAN = 3
POINT = {"BM": 128, "BN": 64, "CONSUMERS": 1, "STAGES": 3, "RAW": 2, "SPAN": 2, "SPLITS": 1}
# 64 x 64 tiles, where a span of three phases fits beside a ring of four stages
SMALL = {"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 4, "RAW": 2, "SPAN": 2, "SPLITS": 1}
CASES = [
    (measuring.Product(821, 1107, 827), POINT),
    (measuring.Product(821, 1107, 827), SMALL),
    (measuring.Product(821, 1107, 827), {**SMALL, "SPAN": 3}),
    (
        measuring.Product(715, 1427, 409, "NT"),
        {"BM": 128, "BN": 128, "CONSUMERS": 1, "STAGES": 3, "RAW": 3, "SPAN": 1, "SPLITS": 1},
    ),
    (measuring.Product(7181, 35, 5492, "TN"), POINT),
    (measuring.Product(7181, 35, 5492, "TN"), SMALL),
    (measuring.Product(7181, 35, 5492, "TN"), {**SMALL, "SPAN": 3}),
    (measuring.Product(3528, 62, 10787), POINT),
]


def knocked_out(edit: Callable[[str], str]) -> str:
    """This tree's templates with rung 34's edited by ``edit``, in a folder of their own."""
    folder = tempfile.mkdtemp() + "/kernels"
    shutil.copytree(render.KERNELS_DIR, folder)
    path = pathlib.Path(folder, TEMPLATE)
    text = path.read_text()
    edited = edit(text)
    assert edited != text, f"{TEMPLATE} moved: update this probe's edits"
    path.write_text(edited)
    return folder


def main(out: str) -> None:
    arms = {
        "as is": str(render.KERNELS_DIR),
        **{name: knocked_out(edit) for name, edit in KNOCKOUTS.items()},
    }
    rows = []
    for case, point in CASES:
        a, b, c = measuring.operands(case, "bfloat16", 0)
        launches = {"cublas": lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)}
        for arm, folder in arms.items():
            if arm == "half" and point["SPAN"] >= HALF_HANGS_FROM_SPAN:
                continue  # it arrives on slots it never waited for: a slot runs ahead, a hang
            use(folder)
            launches[arm] = xgemm.prepare(a, b, "wgmma_any_ld", out=c, **point)
            launches[arm]()  # compiled and loaded now, from this arm's templates
            torch.cuda.synchronize()
        ms = measuring.median_ms_in_turns(launches, rounds=9, flush_l2=True)
        print(
            f"{case.label:20} {point['BM']} x {point['BN']} SPAN {point['SPAN']} "
            + " ".join(f"{name} {ms[name] * 1e3:6.1f}" for name in launches),
            flush=True,
        )
        rows.append({"case": case.label, "point": point, "ms": ms})
    pathlib.Path(out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
