# Prepared for the next device session (untimed here): the look-back forward's GPU check and
# timing, then the per-kernel profile of the JAX chunked default. Run as
#   LATTNBENCH_COMMIT=<local `git rev-parse --short=12 HEAD`, written out> bash bench/gpu_next.sh  (~6 min)
# (the device copy of .git can be stale, so do not compute the commit there)
source bench/gpu_setup.sh
LOOKBACK_BUDGET_S=300 timeout 360 python3 bench/triton_lookback_dev.py 2>&1 | tail -40
JAX_PROF_VARIANTS=v2-c256-direct-lowall,v2-c128-direct-lowall timeout 150 python3 bench/jax_prof.py 2>&1 \
  | grep -v -e Deprecation -e "st = dict" | head -110
