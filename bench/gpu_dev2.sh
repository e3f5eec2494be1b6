# Session-2 GPU call 1: jax-triton check-grad + speed beside lightning/triton, then the Triton probe.
source bench/gpu_setup.sh
timeout 150 lattnbench check-grad -k 'lightning/jax-triton,lightning/triton' -n 1024,4096 -b 2 --heads 8 -d 128 \
  --dtype bf16 --initial-state both --out $OUT/jt-check.json 2>&1 | grep -v "━" | tail -25
timeout 200 lattnbench speed -k 'lightning/triton,lightning/jax-triton' -n 4096..32768 -m fwd,fwdbwd \
  --out $OUT/jt-speed.json 2>&1 | grep -v "━" | tail -25
DEV2_BUDGET_S=200 timeout 260 python3 bench/triton_dev2.py host tma 2>&1 | grep -v "^\s*$" | tail -80
