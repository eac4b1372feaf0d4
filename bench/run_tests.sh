#!/usr/bin/env bash
# The GPU test suite, on a machine with a CUDA GPU: install xgemm from this checkout,
# compile every kernel the suite needs into CuPy's disk cache (bench/precompile.py, in
# parallel), then `pytest -m gpu`. The log goes to $OUT/pytest.log (OUT: default ./out);
# failures and the summary line are printed last; the exit status is pytest's.
#
#   bash bench/run_tests.sh
#   PYTEST_ARGS="-k wgmma" bash bench/run_tests.sh   # a part of the suite
#   MARK=multigpu bash bench/run_tests.sh            # the two-GPU tests (a two-GPU machine)
#   SKIP_PRECOMPILE=1 ...                            # when the disk cache is already warm
#
# The install takes no dependencies (--no-deps): the machine must have CuPy, pytest and
# ml_dtypes already; elsewhere use README.md's `pip install -e ".[cuda13,test]"`.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export XGEMM_TUNE_CACHE=${XGEMM_TUNE_CACHE:-$OUT/tuned.json}  # a tuning file of its own
pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 \
  || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import cupy; print('cupy', cupy.__version__, 'cuda', cupy.cuda.runtime.runtimeGetVersion())"
if [ "${SKIP_PRECOMPILE:-0}" != 1 ]; then
  PYTHONPATH=. python3 bench/precompile.py || exit 1
fi
python3 -m pytest -q -p no:cacheprovider -m "${MARK:-gpu}" -rs ${PYTEST_ARGS:-} \
  > "$OUT/pytest.log" 2>&1
status=$?
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20
tail -1 "$OUT/pytest.log"
exit $status
