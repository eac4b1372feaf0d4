"""The ladder: one declaration per variant, in the order a reader should meet them.

Adding a variant means a template under ``kernels/gemm/`` and one ``register(Variant(...))``
in the module of its part of the ladder (``cuda_cores``: rungs 1-10, ``tensor_cores``:
11-17, ``regimes``: 18 on, ``grouped``: the grouped product; the memory-bound families'
are ``xgemm/memory_bound/declarations.py``, registered here in turn); the tests, the
compile check and the benchmark walk the registry and pick it up.
Expressions are Python over the template's own parameter names, plus ``THREADS`` (threads
per block) and ``BYTES`` (the size of one element of the dtype) in constraints and shared
memory, and ``M``, ``N`` (the output's shape), ``SMS`` (the GPU's multiprocessors) and
``BATCH`` (the products in the launch) in the grid. Every variant reads A and B
row- or column-major and takes float32, float64, float16 and bfloat16 unless its
declaration says otherwise (``a_layouts``, ``b_layouts``, ``dtypes``), on any GPU CuPy
runs on unless it names the oldest (``min_cc``).

Defaults are the fastest point of each space at 4096 x 4096 x 4096 on an H100 (from
``xgemm.tools.bench.sweep``; for mma in float16, where STAGES=3 and 4 lie within 1%), except
coarse2d, which keeps the seed text's configuration, wmma (not swept), mma_tf32 (mma's,
6% behind its own sweep's best, STAGES=2: 171.4 against 183.1 TFLOP/s,
bench/results/h100/sweeps/mma_tf32_4096.txt), wgmma_ring (the fastest point of
wgmma_bfloat16_4096.csv, C stored from registers: 4 stages), wgmma (the fastest point of
wgmma_tma_store_{float16,bfloat16}_{4096,8192}.csv), dmma (dmma_float64_4096.csv, which
swept the instruction's k too: m16n8k8 won) and
wgmma_tf32 (the fastest of wgmma_bfloat16_4096.csv and wgmma_tf32_tma_store_4096.csv:
its float32 C staged for TMA leaves room for two stages only, which lost) and
wgmma_inplace (within 3% of the fastest of bench/inplace.py's six points on its four
products with a side under 128; wider ones want 128-wide tiles, 1.5x faster on
2767 x 206 x 13614 and 2x on 4095³: evidence/inplace_bfloat16_h200_3e771ad.json); the
sweeps are in bench/results/h100/sweeps/.
Three wgmma switches that measured no gain left the template (docs/notes.md): consumers
taking whole tiles in turn (1-10% slower at 128 x 128), clusters of two sharing B by
multicast (within 1%), C stored one value at a time.
"""

# Imported in ladder order: registering a variant puts it next in the ladder.
from . import cuda_cores  # noqa: F401, I001
from . import tensor_cores  # noqa: F401
from . import regimes  # noqa: F401
from . import turned  # noqa: F401
from ..memory_bound import declarations as _memory_bound  # noqa: F401
from . import grouped  # noqa: F401
