#!/usr/bin/env bash
# The canonical benchmark: one run, on one commit, of everything README.md's generated
# tables and figures are rendered from, written whole into bench/results/<gpu>/:
#
#   float32.json float16.json bfloat16.json float64.json
#                    xgemm bench --dtype D --json: every variant that takes D (exact rungs;
#                    TF32 rungs only by name), cuBLAS, square sizes 128..8192
#   tf32.json        xgemm bench --precision tf32: the TF32 rungs, auto and cuBLAS in TF32,
#                    square sizes with B a transposed view (NT: the layout they read)
#   call_cost.json   xgemm bench --overhead --json: what a call costs besides its kernel
#   suite_P.json     xgemm bench --suite P --json, for P in tf32 float64 float16 bfloat16
#                    float32 float8 int8: auto against cuBLAS on the practitioner's cases
#                    (8-bit: against cuBLASLt through torch._scaled_mm, torch._int_mm)
#   float32.png float16.png bfloat16.png float64.png float32_roofline.png
#                    TFLOP/s against size of each dtype's run, and float32's roofline
#
# The *.json and *.png already there are removed first (sweeps/ and evidence/ stay), so the
# directory never mixes runs. Afterwards, where the repository is: `xgemm report --write`
# renders README.md's tables from them, and `xgemm report --check` (CI) keeps them agreed.
#
#   bash bench/run_canonical.sh
#   GPU=h100            the directory's name (default: from the GPU's name, "NVIDIA H100
#                       80GB HBM3" -> h100)
#   DEST=dir            write there instead of bench/results/$GPU
#   XGEMM_COMMIT=abc1234
#                       the commit to record in each file's "machine" where the checkout has
#                       no .git (otherwise `git rev-parse --short HEAD`, "-dirty" if edited)
#   ONLY="float16 tf32" run only these parts (of float32 float16 bfloat16 float64 tf32
#                       call_cost suite_tf32 suite_float64 suite_float16 suite_bfloat16
#                       suite_float32 suite_float8 suite_int8), replacing only their
#                       files: to split a run that would
#                       outlast a time limit; the parts must then come from the same commit
#
# With $OUT set (a lent machine, whose $OUT comes back), the results are also packed into
# $OUT/$GPU.tgz and the printed tables into $OUT/logs.tgz; to take them in, in the checkout:
#   git rm -q bench/results/h100/*.json bench/results/h100/*.png   # (a whole run only)
#   tar xzf <where $OUT came back>/h100.tgz -C bench/results && xgemm report --write
set -u
export PYTHONUNBUFFERED=1
pip install -q --no-deps --no-build-isolation -e . > /tmp/xgemm_install.log 2>&1 \
  || { cat /tmp/xgemm_install.log; exit 1; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0) || exit 1
GPU=${GPU:-$(python3 -c 'import re, sys
words = re.findall(r"[a-z]*[0-9][a-z0-9]*", sys.argv[1].lower().replace("nvidia", ""))
print(words[0] if words else "gpu")' "$name")}
DEST=${DEST:-bench/results/$GPU}
LOGS=$(mktemp -d)
mkdir -p "$DEST"
echo "$name -> $DEST, commit $(python3 -c 'from xgemm.tools.machine import source_commit as c; print(c() or "unknown: set XGEMM_COMMIT")')"
python3 -c "import cupy; print('cupy', cupy.__version__, 'cuda', cupy.cuda.runtime.runtimeGetVersion())"

parts=${ONLY:-float32 float16 bfloat16 float64 tf32 call_cost suite_tf32 suite_float64 \
  suite_float16 suite_bfloat16 suite_float32 suite_float8 suite_int8}
[ -z "${ONLY:-}" ] && rm -f "$DEST"/*.json "$DEST"/*.png
status=0
for part in $parts; do
  rm -f "$DEST/$part.json"
  case $part in
    float32)
      rm -f "$DEST"/float32*.png
      args=(--dtype float32 --plot "$DEST/float32.png" --roofline "$DEST/float32_roofline.png") ;;
    float16|bfloat16|float64)
      rm -f "$DEST/$part.png"
      args=(--dtype "$part" --plot "$DEST/$part.png") ;;
    tf32)
      args=(--precision tf32 --shapes 128x128x128:NT,256x256x256:NT,512x512x512:NT,1024x1024x1024:NT,2048x2048x2048:NT,4096x4096x4096:NT,8192x8192x8192:NT) ;;
    call_cost)
      args=(--overhead) ;;
    suite_*)
      args=(--suite "${part#suite_}") ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
  python3 -m xgemm bench "${args[@]}" --json "$DEST/$part.json" > "$LOGS/$part.txt" 2>&1
  code=$?
  echo "== $part: exit code $code"
  grep -E "^variant|4096x4096x4096|8192x8192x8192|^dtype|^part|^(float|bfloat|tf32)" "$LOGS/$part.txt"
  [ $code = 0 ] || status=$code
done
if [ -n "${OUT:-}" ]; then  # few files come back from a lent machine: two archives
  mkdir -p "$OUT"
  (cd "$(dirname "$DEST")" && tar czf "$OUT/$GPU.tgz" "$(basename "$DEST")"/*.json \
    "$(basename "$DEST")"/*.png 2>/dev/null)
  (cd "$LOGS" && tar czf "$OUT/logs.tgz" ./*.txt)
fi
exit $status
