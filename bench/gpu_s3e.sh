# Session 3, fourth call: the JAX chunked forward with the intra-chunk decay folded into k (intra="fold")
# against the mask form, chunk 128, n = 32768.
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s3e.sh   (~1.5 min)
source bench/gpu_setup.sh
JAX_DEV_VARIANTS=v2-c128-mask,v2-c128-fold JAX_DEV_SIZES=32768 JAX_DEV_BUDGET_S=80 \
  timeout 120 python3 bench/jax_dev2.py time 2>&1 | grep "^time" | tail -10
