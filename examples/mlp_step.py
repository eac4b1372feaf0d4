"""An MLP training step, written as a CuPy user writes one, with xgemm's matmul and with
cupy.matmul, timed in the same run on the same data, and their gradients compared.

The network: 8192 x 1024 -> 4096 -> 4096 -> 1024, GELU (tanh form) after the hidden
layers, a squared-error loss, one SGD update. Per layer the forward is ``x @ W + b``, the
backward ``x.T @ dz`` (the weight's gradient), ``dz @ W.T`` (the input's) and ``dz``
summed over the batch (the bias's): three products per layer, nine per step. Both steps
share every elementwise kernel (GELU, its derivative, the loss, the update); xgemm's adds
the bias in its matmul's epilogue instead of a pass of its own. Training needs the
pre-activation ``z`` for GELU's derivative, so the training forward keeps ``z`` and
applies GELU apart; an inference forward (no backward) fuses bias and GELU into the
matmul, and is timed too.

    python examples/mlp_step.py                       # float16, bfloat16 and float32
    python examples/mlp_step.py --dtype float16 --steps 20
"""

from __future__ import annotations

import argparse
import statistics

import cupy

import xgemm

SIZES = (1024, 4096, 4096, 1024)
BATCH = 8192

# The tanh form of GELU and its derivative, computed in float32 for every dtype.
gelu = cupy.ElementwiseKernel(
    "T z", "T y",
    "float v = (float)z; float t = tanhf(0.7978845608f * (v + 0.044715f * v * v * v));"
    "y = (T)(0.5f * v * (1.0f + t));",
    "xgemm_example_gelu")
gelu_backward = cupy.ElementwiseKernel(
    "T dy, T z", "T dz",
    "float v = (float)z; float u = 0.7978845608f * (v + 0.044715f * v * v * v);"
    "float t = tanhf(u);"
    "float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * v * v);"
    "dz = (T)((float)dy * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du));",
    "xgemm_example_gelu_backward")
loss_grad = cupy.ElementwiseKernel(  # d(0.5 ||h - target||^2 / batch) / dh
    "T h, T target, float32 scale", "T d", "d = (T)(((float)h - (float)target) * scale);",
    "xgemm_example_loss_grad")
sgd = cupy.ElementwiseKernel("T grad, float32 lr", "T w", "w = (T)((float)w - lr * (float)grad);",
                             "xgemm_example_sgd")


def with_cupy(x, w, b=None):
    """x @ w (+ b), as a CuPy user writes it: the bias in a pass of its own."""
    y = cupy.matmul(x, w)
    return y if b is None else y + b


def with_xgemm(x, w, b=None):
    """x @ w (+ b), the bias in the product's epilogue."""
    return xgemm.matmul(x, w, bias=b)


def step(matmul, params, x, target, lr=1e-3):
    """One forward, backward and SGD update; returns the gradients (weights, biases)."""
    inputs, pre = [], []
    h = x
    for i, (w, b) in enumerate(params):
        inputs.append(h)
        z = matmul(h, w, b)
        pre.append(z)
        h = gelu(z) if i < len(params) - 1 else z
    dz = loss_grad(h, target, 1.0 / x.shape[0])
    grads = []
    for i in reversed(range(len(params))):
        if i < len(params) - 1:
            dz = gelu_backward(dz, pre[i])
        w, _ = params[i]
        grads.append((matmul(inputs[i].T, dz), dz.sum(axis=0)))
        if i > 0:
            dz = matmul(dz, w.T)
    grads.reverse()
    for (w, b), (dw, db) in zip(params, grads, strict=True):
        sgd(dw, lr, w)
        sgd(db, lr, b)
    return grads


def forward_cupy(params, x):
    h = x
    for i, (w, b) in enumerate(params):
        h = with_cupy(h, w, b)
        h = gelu(h) if i < len(params) - 1 else h
    return h


def forward_xgemm(params, x):
    """Inference: bias and GELU fused into each hidden layer's matmul."""
    h = x
    for i, (w, b) in enumerate(params):
        act = "gelu" if i < len(params) - 1 else None
        h = xgemm.matmul(h, w, bias=b, activation=act)
    return h


def init(dtype, seed=0):
    gen = cupy.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(SIZES, SIZES[1:], strict=False):
        w = gen.standard_normal((fan_in, fan_out), dtype=cupy.float32) / fan_in**0.5
        b = gen.standard_normal((fan_out,), dtype=cupy.float32) * 0.1
        params.append((w.astype(dtype), b.astype(dtype)))
    x = gen.standard_normal((BATCH, SIZES[0]), dtype=cupy.float32).astype(dtype)
    target = gen.standard_normal((BATCH, SIZES[-1]), dtype=cupy.float32).astype(dtype)
    return params, x, target


def time_ms(call, steps, warmup=3):
    """Milliseconds per call: ``steps`` calls queued between two events, median of 5."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(5):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(steps):
            call()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / steps)
    return statistics.median(times)


def relative(a, b) -> float:
    a, b = a.astype(cupy.float64), b.astype(cupy.float64)
    return float(cupy.linalg.norm(a - b) / cupy.linalg.norm(b))


def compare(dtype: str, steps: int) -> dict:
    """The step with each matmul, from the same parameters: gradients compared against a
    float64 step, then both timed; the inference forward timed likewise."""
    np_dtype = xgemm.specs.numpy_dtype(dtype)
    params, x, target = init(np_dtype)
    exact = [(w.astype(cupy.float64), b.astype(cupy.float64)) for w, b in params]
    reference = step(with_cupy, exact, x.astype(cupy.float64), target.astype(cupy.float64))
    errors = {}
    for name, matmul in (("xgemm", with_xgemm), ("cupy", with_cupy)):
        copy = [(w.copy(), b.copy()) for w, b in params]
        grads = step(matmul, copy, x, target)
        errors[name] = max(relative(g, r) for pair, ref in zip(grads, reference, strict=True)
                           for g, r in zip(pair, ref, strict=True))
    row = {"dtype": dtype, "grad_error_xgemm": errors["xgemm"], "grad_error_cupy": errors["cupy"]}
    for name, matmul in (("xgemm", with_xgemm), ("cupy", with_cupy)):
        copy = [(w.copy(), b.copy()) for w, b in params]
        row[f"step_ms_{name}"] = time_ms(lambda m=matmul, p=copy: step(m, p, x, target), steps)
    row["step_x_cupy"] = row["step_ms_cupy"] / row["step_ms_xgemm"]
    row["forward_ms_xgemm"] = time_ms(lambda: forward_xgemm(params, x), steps)
    row["forward_ms_cupy"] = time_ms(lambda: forward_cupy(params, x), steps)
    row["forward_x_cupy"] = row["forward_ms_cupy"] / row["forward_ms_xgemm"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], action="append")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    for i, dtype in enumerate(args.dtype or ["float16", "bfloat16", "float32"]):
        row = compare(dtype, args.steps)
        if i == 0:
            print("  ".join(row))
        print("  ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()),
              flush=True)


if __name__ == "__main__":
    main()
