#!/usr/bin/env bash
# The generalisation suites on a machine with a CUDA GPU (xgemm.tools.generalisation): for each
# seed and part, `xgemm bench --suite random` (every candidate timed: auto's regret), then,
# unless MODELS=0, `xgemm bench --suite models` in bfloat16. Each file (JSON, the random
# suite's gzip-compressed, as published) is written as its
# rows come (a part cut short by its time limit keeps what it measured) into DEST.
#
#   SEEDS="2 3" PARTS="float16 bfloat16 float32" bash bench/run_generalisation.sh
#   COUNT=36            shapes per seed
#   LIMIT=170           seconds each part may take
#   DEST=dir            where the JSON go (default: bench/results/$GPU, as run_canonical.sh)
#   MODELS=0            skip the models suite
#   MIN_DIM=512         draw M, N and K from 512 up (a calibration's stratum of large
#                       shapes; its files are named random_PART_seedS_large.json.gz)
#   MAX_K=16            draw K from 1 to 16 (with MIN_DIM: a stratum of tiny-K products
#                       with large outputs; files random_PART_seedS_tinyk.json.gz)
set -u
export PYTHONUNBUFFERED=1
export XGEMM_TUNE_CACHE=${XGEMM_TUNE_CACHE:-/tmp/xgemm_tuned.json}  # no tuned entries
pip install -q --no-deps --no-build-isolation -e . > /tmp/xgemm_install.log 2>&1 \
  || { cat /tmp/xgemm_install.log; exit 1; }
DEST=${DEST:-bench/results/h100}
mkdir -p "$DEST"
status=0
for seed in ${SEEDS:-2 3}; do
  for part in ${PARTS:-float16 bfloat16 float32}; do
    case $part in
      tf32) args=(--dtype float32 --precision tf32) ;;
      *) args=(--dtype "$part") ;;
    esac
    name=random_${part}_seed$seed${MAX_K:+_tinyk}
    [ -z "${MAX_K:-}" ] && name=$name${MIN_DIM:+_large}
    timeout "${LIMIT:-170}" python3 -m xgemm bench --suite random --seed "$seed" \
      --count "${COUNT:-36}" --min-dim "${MIN_DIM:-1}" ${MAX_K:+--max-k "$MAX_K"} "${args[@]}" \
      --json "$DEST/$name.json.gz" \
      > "$DEST/$name.txt" 2>&1
    code=$?
    echo "== $name: exit $code; $(tail -1 "$DEST/$name.txt")"
    [ $code = 0 ] || status=$code
  done
done
if [ "${MODELS:-1}" != 0 ]; then
  timeout "${LIMIT:-170}" python3 -m xgemm bench --suite models --dtype bfloat16 \
    --no-regret --json "$DEST/models_bfloat16.json" > "$DEST/models_bfloat16.txt" 2>&1
  code=$?
  echo "== models bfloat16: exit $code; $(tail -1 "$DEST/models_bfloat16.txt")"
  [ $code = 0 ] || status=$code
fi
exit $status
