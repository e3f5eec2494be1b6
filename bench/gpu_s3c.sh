# Session 3, third call: backward paths timed (split / one / fused, torch; jax-triton one vs three calls),
# then the JAX chunked direct-state variants without the dynamic-update-slices, chunk 64 / 128 / 256.
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s3c.sh   (~4 min)
source bench/gpu_setup.sh
BWD_SIZES=512,1024,8192,32768 BWD_JAX_SIZES=8192 BWD_BUDGET_S=170 timeout 220 python3 bench/bwd_paths_dev.py time jax \
  2>&1 | grep -e "^\[" | grep -v -e Warning | tail -40
JAX_DEV_VARIANTS=v2-c128-direct-lowall,v2-c64-direct-lowall,v2-c256-direct-lowall JAX_DEV_SIZES=32768 JAX_DEV_BUDGET_S=80 \
  timeout 120 python3 bench/jax_dev2.py time 2>&1 | grep "^time" | tail -10
