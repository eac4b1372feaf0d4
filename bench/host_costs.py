"""The host's microseconds a call of ``xgemm.matmul`` takes, by the copies its plan makes:
the cost model's ``call_host`` (no copies) and ``copy_host`` (what one launch of a copy
adds, measured on the pad kernel's, which pads both operands at once; the model prices a
transpose's launch the same).

PyTorch tensors, plan-cache hits, products small enough that the GPU keeps up with the
host: each figure is the median of ``--rounds`` rounds of ``--calls`` calls in a row, the
GPU synchronised between rounds, ``torch.matmul`` on the same tensors beside it. The
constants: the median of the calls that copy nothing, and the median of those that make
one copy launch, less the first. ``xgemm calibrate --host FILE`` ships them.

    PYTHONPATH=. python bench/host_costs.py --json host_costs.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from host_floor import per_call_us  # the same turns of calls, timed the same way

import xgemm
from xgemm import plan as planning
from xgemm.signature import call_key
from xgemm.tools.machine import machine_info

#: (m, n, k, layout, dtype, variant): some copy nothing, some pad one operand or both (K
#: odd: rows TMA cannot read); small enough to leave the host the bound of a queue of
#: calls
CASES = [
    (64, 64, 64, "NN", "bfloat16", "wgmma"), (64, 64, 72, "NT", "bfloat16", "wgmma"),
    (64, 64, 75, "TN", "bfloat16", "wgmma"), (96, 128, 64, "NN", "bfloat16", "auto"),
    (64, 64, 64, "NN", "float16", "mma"), (64, 64, 64, "NN", "float32", "tiled"),
    (200, 200, 72, "NT", "float32", "pipelined"),
    (64, 64, 75, "NN", "bfloat16", "wgmma"), (64, 64, 75, "NT", "bfloat16", "wgmma"),
]


def operands(m: int, n: int, k: int, layout: str, dtype: torch.dtype):
    """Fresh random A and B read as ``layout`` says ("T": a transposed view)."""
    device = torch.device("cuda", 0)
    a = (torch.randn(k, m, device=device, dtype=dtype).T if layout[0] == "T"
         else torch.randn(m, k, device=device, dtype=dtype))
    b = (torch.randn(n, k, device=device, dtype=dtype).T if layout[1] == "T"
         else torch.randn(k, n, device=device, dtype=dtype))
    return a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for m, n, k, layout, dtype, variant in CASES:
        a, b = operands(m, n, k, layout, getattr(torch, dtype))
        xgemm.matmul(a, b, variant=variant)
        plan = planning.PLANS.get(call_key(a, b, None, "out", None, variant, {}, None, None,
                                           None, False))
        launches = (plan.pad_launch is not None) + sum(
            x.transpose is not None for x in (plan.a, plan.b))
        row = {"case": f"{m}x{n}x{k}:{layout}", "dtype": dtype, "variant": variant,
               "runs": plan.variant.name, "copies": list(plan.copies),
               "copy_launches": launches,
               "xgemm_us": per_call_us(lambda a=a, b=b, v=variant: xgemm.matmul(a, b, variant=v),
                                       args.calls, args.rounds),
               "torch_us": per_call_us(lambda a=a, b=b: torch.matmul(a, b), args.calls,
                                       args.rounds)}
        rows.append(row)
        print(f"{row['case']:16s} {dtype:9s} {variant:10s} {row['runs']:11s} copies "
              f"{','.join(row['copies']) or '-':4s} launches {launches}  xgemm "
              f"{row['xgemm_us']:6.2f} us  torch.matmul {row['torch_us']:6.2f} us")
    none = [r["xgemm_us"] for r in rows if not r["copies"]]
    call_host = statistics.median(none)
    copy_host = statistics.median(r["xgemm_us"] for r in rows if r["copy_launches"] == 1
                                  ) - call_host
    print(f"call_host {call_host:.2f} us (median of {len(none)} calls with no copies), "
          f"copy_host {copy_host:.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(), "rows": rows,
                       "call_host_us": call_host, "copy_host_us": copy_host}, f, indent=1)


if __name__ == "__main__":
    main()
