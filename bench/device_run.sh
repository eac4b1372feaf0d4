#!/usr/bin/env bash
# One call on the lent H100: install, the GPU test suite, then timings. Full logs go to
# $OUT (or ./out); the short tables come last on stdout.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import cupy; print('cupy', cupy.__version__, 'cuda', cupy.cuda.runtime.runtimeGetVersion())"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -p no:cacheprovider -m gpu ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20
  tail -1 "$OUT/pytest.log"
fi
for v in ${SWEEP:-}; do
  python3 -m xgemm.bench ${SIZE:-4096} "$v" > "$OUT/sweep_$v.txt" 2>&1; head -6 "$OUT/sweep_$v.txt"
done
python3 -m xgemm.bench ${SIZE:-4096} 2>&1 | tee "$OUT/bench.txt"
