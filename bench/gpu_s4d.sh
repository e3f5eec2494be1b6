# Session 4, last call: the final code (transposed passes in the autotune lists, ONE_MAX_T 1024,
# jax-triton on the transposed config): bf16 check-grad of lightning/triton and lightning/jax-triton,
# a speed sweep of both beside cuDNN, then the backward paths (split vs one) at small n.
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s4d.sh
source bench/gpu_setup.sh
timeout 150 lattnbench check-grad -k lightning/triton,lightning/jax-triton -n 1024,4096 -b 2 --heads 8 -d 128 \
  --dtype bf16 --initial-state both --decay alibi --out $OUT/check-grad-bf16.json 2>&1 | grep -v "━" | tail -30
timeout 300 lattnbench speed -k lightning/triton,lightning/jax-triton,softmax/sdpa-cudnn -n 512..32768 -b 4 --heads 32 \
  -d 128 --dtype bf16 -m fwd,bwd,fwdbwd --decay alibi --budget 0.3 --point-timeout 120 --out $OUT/triton-final.json 2>&1 \
  | grep -v "━" | grep -v "│       │" | tail -60
BWD_PATHS=split,one BWD_SIZES=512,1024,2048,4096 BWD_BUDGET_S=80 timeout 100 python3 bench/bwd_paths_dev.py time 2>&1 | tail -20
