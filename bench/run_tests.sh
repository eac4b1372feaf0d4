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
#   GPUS=2 bash bench/run_tests.sh                   # the tests split over 2 GPUs, 4 shards
#                                                    # each at once (the gpu mark's tests only)
#   SHARDS=4 bash bench/run_tests.sh                 # 4 shards at once on one GPU
#   SHARDS=8 ONLY="0 1 2 3" bash bench/run_tests.sh  # some of the shards: the whole suite in
#   SHARDS=8 ONLY="4 5 6 7" SKIP_PRECOMPILE=1 ...    # two runs where one may last only 10
#                                                    # minutes (the cache kept between them)
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
GPUS=${GPUS:-1}
shards=${SHARDS:-$((GPUS > 1 ? 4 * GPUS : 1))}
# ONLY: which shards this run takes (all unless it says), checked before anything compiles;
# the same ids are dealt alike on every run, so runs that take the other shards complete
# the suite
run=${ONLY:-$(seq 0 $((shards - 1)))}
if [ -n "${ONLY:-}" ] && [ "$shards" -le 1 ]; then
  echo "ONLY names shards, but this run has none: set SHARDS as well"; exit 2
fi
for s in $run; do
  case "$s" in
    ''|*[!0-9]*) echo "ONLY: '$s' is not a shard number (0 to $((shards - 1)), spaced)"; exit 2 ;;
  esac
  [ "$s" -lt "$shards" ] || { echo "ONLY: shard $s, but SHARDS is $shards"; exit 2; }
done
if [ "${SKIP_PRECOMPILE:-0}" != 1 ]; then
  PYTHONPATH=. python3 bench/precompile.py || exit 1
fi
if [ "$shards" -gt 1 ]; then
  # The collected test ids dealt round-robin into the shards, 4 a GPU unless SHARDS says
  # (one pytest process each, CUDA_VISIBLE_DEVICES its GPU, the shards dealt over the GPUs
  # in turn); each shard's log is $OUT/shardN.log, and the summary lines are printed last.
  # Ids hold spaces (parametrised ids): one a line, not split.
  python3 -m pytest -q -p no:cacheprovider -m gpu --co ${PYTEST_ARGS:-} > "$OUT/collect.log" 2>&1
  grep "::" "$OUT/collect.log" > "$OUT/ids.txt"
  if [ ! -s "$OUT/ids.txt" ]; then  # an error while collecting, or a selection of nothing
    tail -20 "$OUT/collect.log"; echo "no GPU tests collected ($OUT/collect.log)"; exit 1
  fi
  for s in $(seq 0 $((shards - 1))); do
    awk -v n="$shards" -v s="$s" '(NR - 1) % n == s' "$OUT/ids.txt" > "$OUT/shard$s.txt"
  done
  echo "$(wc -l < "$OUT/ids.txt") tests in $shards shards; running shards" $run
  i=0  # this run's shards dealt over the GPUs in turn
  for s in $run; do
    if [ ! -s "$OUT/shard$s.txt" ]; then  # more shards than ids: pytest given none runs all
      echo "no tests" > "$OUT/shard$s.log"; echo 0 > "$OUT/shard$s.rc"; continue
    fi
    ( CUDA_VISIBLE_DEVICES=$((i % GPUS)) python3 -c "import pytest, sys; sys.exit(pytest.main(
        ['-q', '-p', 'no:cacheprovider', '-m', 'gpu', '-rs'] + open(sys.argv[1]).read().splitlines()))" \
        "$OUT/shard$s.txt" > "$OUT/shard$s.log" 2>&1
      echo $? > "$OUT/shard$s.rc" ) &
    i=$((i + 1))
  done
  wait
  status=0
  for s in $run; do
    grep -E "^(FAILED|ERROR)" "$OUT/shard$s.log" | head -5
    echo "shard $s: $(tail -1 "$OUT/shard$s.log")"
    [ "$(cat "$OUT/shard$s.rc")" = 0 ] || status=1
  done
  exit $status
fi
python3 -m pytest -q -p no:cacheprovider -m "${MARK:-gpu}" -rs ${PYTEST_ARGS:-} \
  > "$OUT/pytest.log" 2>&1
status=$?
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20
tail -1 "$OUT/pytest.log"
exit $status
