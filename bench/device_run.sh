#!/usr/bin/env bash
# One call on the lent H100: install, the GPU test suite, optional sweeps, then the full
# default benchmark. Full logs and results go to $OUT (or ./out); short tables come last.
#   SWEEP="tiled vectorized"  sweep these variants' spaces at SIZE^3 (default 4096), in
#                             SWEEP_DTYPE (default float32; wgmma: SWEEP_DTYPE=bfloat16)
#   TUNE_SHAPES="MxNxK,..."   xgemm tune on these shapes, then auto against every default
#   TUNE_VARIANTS="a,b"       ... only these variants;  TUNE_ARGS="--strategy random ..."
#   SKIP_TESTS=1              skip the test suite;  BENCH_ARGS="..."  arguments to xgemm bench
#   CASES="64x512x512x64,4096x4096x4096:NT"  bench these cases (batched, transposed) in
#                             each of DTYPES (default: float32 float16 bfloat16 float64)
#   FAMILIES="transpose reverse sum stencil"  bandwidth benches of the memory-bound families
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export XGEMM_TUNE_CACHE=${XGEMM_TUNE_CACHE:-$OUT/tuned.json}  # (the image has no platformdirs)
pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import cupy; print('cupy', cupy.__version__, 'cuda', cupy.cuda.runtime.runtimeGetVersion())"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  PYTHONPATH=. python3 bench/precompile.py  # every point into CuPy's disk cache, in parallel
  python3 -m pytest -q -p no:cacheprovider -m gpu -rs ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20
  tail -1 "$OUT/pytest.log"
fi
for v in ${SWEEP:-}; do
  python3 -m xgemm sweep "$v" --shape ${SIZE:-4096}x${SIZE:-4096}x${SIZE:-4096} \
    --dtype ${SWEEP_DTYPE:-float32} > "$OUT/sweep_$v.txt" 2>&1
  head -4 "$OUT/sweep_$v.txt"
done
if [ -n "${TUNE_SHAPES:-}" ]; then  # tune, then auto against every variant's defaults, one run
  variants=${TUNE_VARIANTS:-$(python3 -c 'import xgemm; print(",".join(n for n in xgemm.variants() if xgemm.get_variant(n).precision is None))')}
  python3 -m xgemm tune --clear --shapes "$TUNE_SHAPES" --variants "$variants" ${TUNE_ARGS:-} \
    --csv "$OUT/tune.csv" > "$OUT/tune.txt" 2>&1
  echo "xgemm tune exit code $?"; cat "$OUT/tune.txt"
  python3 -m xgemm bench --variants "auto,$variants" \
    --shapes "$TUNE_SHAPES" --json "$OUT/auto.json" > "$OUT/auto.txt" 2>&1
  echo "auto bench exit code $?"; cat "$OUT/auto.txt"
fi
for dtype in ${CASES:+${DTYPES:-float32 float16 bfloat16 float64}}; do
  python3 -m xgemm bench --dtype "$dtype" --shapes "$CASES" --json "$OUT/cases_$dtype.json" \
    > "$OUT/cases_$dtype.txt" 2>&1
  echo "cases $dtype exit code $?"; cat "$OUT/cases_$dtype.txt"
done
for family in ${FAMILIES:-}; do  # memory-bound families: bandwidth against copy and CuPy
  python3 -m xgemm bench --family "$family" --json "$OUT/bandwidth_$family.json" \
    > "$OUT/bandwidth_$family.txt" 2>&1
  echo "bandwidth $family exit code $?"; cat "$OUT/bandwidth_$family.txt"
done
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 -m xgemm bench --json "$OUT/results.json" --csv "$OUT/results.csv" ${BENCH_ARGS:-} \
    > "$OUT/bench.txt" 2>&1
  echo "xgemm bench exit code $?"
  grep -E "^variant|4096x4096x4096" "$OUT/bench.txt"
fi
# at most 8 files come back: the short logs travel together
(cd "$OUT" && tar czf logs.tgz --remove-files install.log ./*.txt 2>/dev/null)
