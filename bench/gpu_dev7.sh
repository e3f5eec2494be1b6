# Session-2 GPU call 6: TMA+warp-specialized forward probe; JAX v2 variants at n=32768 (time only).
source bench/gpu_setup.sh
DEV2_BUDGET_S=35 timeout 50 python3 bench/triton_dev2.py ws 2>&1 | grep "^\[" | tail -14
JAX_DEV_VARIANTS=v2-c256-direct-lowall,v2-c256-direct-lowpart,v2-c256-bhtd-lowall,v2-c256-bhtd-lowpart,v2-c256-direct-lowall-bthd,v2-c256-lowall,base-c256-lowpart \
  JAX_DEV_SIZES=32768 JAX_DEV_BUDGET_S=90 timeout 120 python3 bench/jax_dev2.py time 2>&1 | grep -E "^time|ERROR" | tail -20
