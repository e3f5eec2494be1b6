# Session-2 GPU call 3: where the small-n host time goes (torch.profiler), then the JAX chunked variants.
source bench/gpu_setup.sh
DEV2_BUDGET_S=80 timeout 120 python3 bench/triton_dev2.py prof 2>&1 | grep "^\[" | tail -20
head -45 $OUT/triton_dev2_torchprof.txt
JAX_DEV_BUDGET_S=240 timeout 300 python3 bench/jax_dev2.py 2>&1 | grep -v "^\s*$" | tail -70
