export PYTHONPATH=. XGEMM_TUNE_CACHE=$OUT/t.json PYTHONUNBUFFERED=1
timeout 60 python3 bench/.probe.py 4096x4096x4096 float16,bfloat16 compile 2>&1 | tail -2
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -k "pingpong_consumers or batches_and" -x > $OUT/pytest_pp.log 2>&1; tail -3 $OUT/pytest_pp.log
timeout 90 python3 bench/.probe.py 4096x4096x4096 float16,bfloat16 time > $OUT/probe.txt 2>&1; grep -v "^float16 \|^bfloat16 " $OUT/probe.txt | tail -5; grep -E "^(float16|bfloat16) +4096" $OUT/probe.txt | awk '{c[$1]++} c[$1]<=8'
