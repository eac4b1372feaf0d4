"""What padding an operand for TMA costs: the pad kernel that a plan queues for an
operand whose rows are not 16-byte multiples (``xgemm.launch.pad_rows``), timed alone on
a seeded sample of 16-bit operands (lines from 1 to 16384, each of 1 to 16384 values,
an odd count), with CUDA events, L2 flushed, median of 30, beside a device-to-device
``cudaMemcpyAsync`` of as many contiguous bytes (DRAM's pace); and the host's time to
queue one. Fits the cost model's copy constants to them (``xgemm.calibrate.fit_copies``), which
``xgemm calibrate --copies out.json`` then uses.

    PYTHONPATH=. python bench/pad_copy.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np

#: Operands timed, and the seed that draws them.
COUNT, SEED = 40, 0
#: Most bytes of one operand (the sample's largest are a few hundred MB).
MAX_BYTES = 2**29


def sample(count: int = COUNT, seed: int = SEED) -> list[tuple[int, int]]:
    """(lines, values a line) of ``count`` 16-bit operands, log-uniform, values odd."""
    rng = np.random.default_rng(seed)
    found = []
    while len(found) < count:
        lines, width = (int(math.exp(rng.uniform(0, math.log(16384)))) for _ in range(2))
        width |= 1
        if lines * width * 2 <= MAX_BYTES:
            found.append((lines, width))
    return found


def measure(shapes: list[tuple[int, int]]) -> list[dict]:
    import cupy

    from xgemm import timing
    from xgemm.launch import pad_rows
    from xgemm.operands import padding, plan_pad_launch
    from xgemm.tma import padded_line

    stream = cupy.cuda.get_current_stream().ptr
    rows = []
    for lines, width in shapes:
        x = cupy.random.standard_normal((lines, width), dtype=cupy.float32).astype(cupy.float16)
        pitch = padded_line(width, 2)  # as a call pads (tma.padded_line)
        y = cupy.empty((lines, pitch), dtype=cupy.float16)
        pad = plan_pad_launch((padding(lines, width * 2, width * 2, pitch * 2, lines * pitch),),
                              cupy.cuda.Device().id)

        def copy(pad=pad, x=x, y=y):
            pad_rows(pad, (x.data.ptr,), (y.data.ptr,), stream)

        copy()
        if not bool((y[:, :width] == x).all()):
            raise RuntimeError(f"the padded copy of {lines} x {width} differs")
        ms = statistics.median(timing.time_launches(copy, warmup=3, repeat=30, flush_l2=True))

        def memcpy(x=x, y=y, size=lines * width * 2):  # the same bytes in one run: the yardstick
            cupy.cuda.runtime.memcpyAsync(y.data.ptr, x.data.ptr, size,
                                          cupy.cuda.runtime.memcpyDeviceToDevice, stream)

        memcpy_ms = statistics.median(timing.time_launches(memcpy, warmup=3, repeat=30,
                                                           flush_l2=True))
        cupy.cuda.get_current_stream().synchronize()
        start = time.perf_counter()
        for _ in range(50):  # few enough that the GPU's queue never fills
            copy()
        host_us = (time.perf_counter() - start) / 50 * 1e6
        cupy.cuda.get_current_stream().synchronize()
        rows.append({"lines": lines, "width": width, "bytes": lines * width * 2,
                     "us": ms * 1e3, "host_us": host_us, "memcpy_us": memcpy_ms * 1e3})
        print(f"{lines:6d} lines x {width:6d}  {lines * width * 2 / 1e6:9.3f} MB  "
              f"{ms * 1e3:8.2f} us (memcpy of as many bytes {memcpy_ms * 1e3:8.2f})  "
              f"host {host_us:5.2f} us", flush=True)
    return rows


def constants(rows: list[dict]) -> dict[str, float]:
    from xgemm.calibrate import fit_copies

    launch, bandwidth, line = fit_copies((r["bytes"], r["lines"], r["us"] * 1e-6) for r in rows)
    predicted = [launch + r["bytes"] / bandwidth + r["lines"] * line for r in rows]
    error = math.sqrt(statistics.fmean(math.log(p / (r["us"] * 1e-6)) ** 2
                                       for p, r in zip(predicted, rows, strict=True)))
    return {"copy_launch": launch, "copy_bandwidth": bandwidth, "copy_line": line,
            "host_us": statistics.median(r["host_us"] for r in rows), "rms_log_error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the measurements and constants here")
    parser.add_argument("--from", dest="source", help="fit from this file's measurements")
    args = parser.parse_args()
    rows = (json.loads(Path(args.source).read_text())["rows"] if args.source
            else measure(sample()))
    fitted = constants(rows)
    print(f"launch {fitted['copy_launch'] * 1e6:.2f} us, bandwidth "
          f"{fitted['copy_bandwidth'] / 1e9:.0f} GB/s, {fitted['copy_line'] * 1e9:.3f} ns a "
          f"line, host {fitted['host_us']:.2f} us a copy; RMS log error "
          f"{fitted['rms_log_error']:.3f}")
    if args.json:
        from xgemm.tools.machine import source_commit

        Path(args.json).write_text(json.dumps(
            {"commit": source_commit(), "rows": rows, "constants": fitted}, indent=1))


if __name__ == "__main__":
    main()
