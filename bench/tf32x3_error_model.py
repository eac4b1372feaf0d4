"""Rung 31's error, emulated on the CPU (no GPU): why it adds each K step's big x big with
the warps' own round-to-nearest, against cuBLAS SGEMM (a sequential float32 FMA chain, each
step rounded to nearest).

The tensor cores are modelled as Hopper's TF32 wgmma is described: products exact, each
hardware step of 4 products added into the float32 sum rounding toward zero, the terms
first truncated to 25 bits below the largest (``--exact-alignment``: not truncated). This
is a model, not a measurement: the GPU's own figures come from ``xgemm bench --suite
tf32x3``.

    python bench/tf32x3_error_model.py              # 24 x 24 outputs, K = 16 .. 16384
    python bench/tf32x3_error_model.py --size 48 --exact-alignment

Prints, for each input kind and K, SGEMM's relative Frobenius error against float64 and
each scheme's error over SGEMM's:
- ``chain``: all three products summed on the tensor cores along K;
- ``rung 31``: each K step's (8) big x big from zero, added rounding to nearest; the
  corrections summed on the tensor cores.
"""

from __future__ import annotations

import argparse

import numpy as np

STEP = 4      # products a tensor-core step adds
K_STEP = 8    # k of one TF32 wgmma: rung 31 adds its big x big once a K step


def toward_zero(x: np.ndarray) -> np.ndarray:
    """float64 to float32, rounded toward zero."""
    y = x.astype(np.float32)
    over = np.abs(y.astype(np.float64)) > np.abs(x)
    y[over] = np.nextafter(y[over], np.float32(0))
    return y


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 to TF32, to nearest with ties away from zero (cvt.rna.tf32.f32)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def tensor_step(total: np.ndarray, products: np.ndarray, bits: int | None) -> np.ndarray:
    """One tensor-core step: ``total`` (float32) plus ``products`` (exact, float64)."""
    terms = np.vstack([total[None].astype(np.float64), products])
    if bits:  # each term truncated to `bits` below the largest one's exponent
        top = np.max(np.abs(terms), axis=0)
        unit = np.ldexp(1.0, (np.floor(np.log2(np.where(top > 0, top, 1.0))) - bits + 1)
                        .astype(int))
        terms = np.trunc(terms / unit) * unit
    return toward_zero(terms.sum(axis=0))


def sgemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    total = np.zeros(a.shape[0] * b.shape[1], np.float32)
    for k in range(a.shape[1]):
        total = (total + np.outer(a[:, k].astype(np.float64), b[k]).ravel()).astype(np.float32)
    return total.reshape(a.shape[0], b.shape[1])


def three_tf32(a: np.ndarray, b: np.ndarray, rung: bool, bits: int | None) -> np.ndarray:
    """big x big + big x small + small x big; ``rung``: as rung 31 sums them."""
    a_big, b_big = tf32(a), tf32(b)
    a_small, b_small = tf32(a - a_big), tf32(b - b_big)
    m, k = a.shape
    total, corrections, step = (np.zeros(m * b.shape[1], np.float32) for _ in range(3))

    def products(x, y, ks):
        return np.array([np.outer(x[:, i].astype(np.float64), y[i]).ravel() for i in ks])

    for k0 in range(0, k, STEP):
        ks = range(k0, min(k, k0 + STEP))
        big = products(a_big, b_big, ks)
        if rung:
            step = tensor_step(step, big, bits)
            corrections = tensor_step(corrections, products(a_big, b_small, ks), bits)
            corrections = tensor_step(corrections, products(a_small, b_big, ks), bits)
            if (k0 + STEP) % K_STEP == 0 or k0 + STEP >= k:
                total = (total + step.astype(np.float64)).astype(np.float32)
                step[:] = 0
        else:
            total = tensor_step(total, products(a_small, b_big, ks), bits)
            total = tensor_step(total, products(a_big, b_small, ks), bits)
            total = tensor_step(total, big, bits)
    if rung:
        total = (total + corrections.astype(np.float64)).astype(np.float32)
    return total.reshape(m, b.shape[1])


def inputs(kind: str, size: int, k: int, rng: np.random.Generator):
    a, b = rng.standard_normal((size, k)), rng.standard_normal((k, size))
    if kind == "uniform":
        a, b = rng.random((size, k)), rng.random((k, size))
    elif kind == "scaled_rows":
        a *= np.ldexp(1.0, rng.integers(-30, 31, (size, 1)))
    elif kind == "cancel":
        half = k // 2
        a[:, half:2 * half] = a[:, :half]
        b[half:2 * half] = -b[:half] * (1 + 1e-3 * rng.standard_normal((half, size)))
    return a.astype(np.float32), b.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=24, help="M = N")
    parser.add_argument("--exact-alignment", action="store_true")
    args = parser.parse_args()
    bits = None if args.exact_alignment else 25
    rng = np.random.default_rng(2)
    print("kind K | SGEMM's error | chain / SGEMM | rung 31 / SGEMM")
    for kind in ("normal", "uniform", "scaled_rows", "cancel"):
        for k in (16, 64, 256, 2048, 16384):
            a, b = inputs(kind, args.size, k, rng)
            exact = a.astype(np.float64) @ b.astype(np.float64)

            def error(c, exact=exact):
                return np.linalg.norm(c.astype(np.float64) - exact) / np.linalg.norm(exact)

            base = error(sgemm(a, b))
            chain, rung = (error(three_tf32(a, b, r, bits)) / base for r in (False, True))
            print(f"{kind} {k} | {base:.2e} | {chain:.2f} | {rung:.2f}", flush=True)


if __name__ == "__main__":
    main()
