# Session 3, second call: the one-launch backward against split / fused (torch + jax-triton), then the
# per-kernel profile of the JAX chunked default at chunk 256 and 128.
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s3b.sh   (~6 min)
source bench/gpu_setup.sh
BWD_BUDGET_S=260 timeout 330 python3 bench/bwd_paths_dev.py 2>&1 | grep -v -e Warning -e warn | tail -60
JAX_PROF_VARIANTS=v2-c256-direct-lowall,v2-c128-direct-lowall timeout 150 python3 bench/jax_prof.py 2>&1 \
  | grep -v -e Deprecation -e "st = dict" | head -120
