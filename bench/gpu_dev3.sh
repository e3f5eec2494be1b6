# Session-2 GPU call 2: the lean launch path (bit-identity, host time), check-grad through it,
# then speed of triton / jax-triton / cuDNN over 512..32768 (JAX now timed in ~10 ms batches).
source bench/gpu_setup.sh
DEV2_BUDGET_S=120 timeout 150 python3 bench/triton_dev2.py fast 2>&1 | grep -v "^\s*$" | grep -v "^Traceback\|^  File\|^    " | tail -30
timeout 150 lattnbench check-grad -k lightning/triton -n 1000,4096 -b 2 --heads 8 --kv-heads 4 -d 128 --dtype bf16 \
  --initial-state both --out $OUT/check.json 2>&1 | grep -E "results|FAIL" | tail -5
timeout 100 lattnbench check-grad -k lightning/triton -n 1000 -b 1 --heads 8 -d 96 --dim-v 64 --dtype bf16,fp16 \
  --reverse --varlen 400,1,599 --out $OUT/check-varlen.json 2>&1 | grep -E "results|FAIL" | tail -5
timeout 330 lattnbench speed -k 'lightning/triton,lightning/jax-triton,softmax/sdpa-cudnn' -n 512..32768 -m fwd,fwdbwd \
  --out $OUT/speed.json 2>&1 | grep -v "━" | tail -70
