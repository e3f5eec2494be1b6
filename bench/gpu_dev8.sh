# Session-2 GPU call 8: JAX chunked — chunk size and XLA's Triton GEMM fusion flag, n=32768 (dev only).
source bench/gpu_setup.sh
V=v2-c256-direct-lowall,v2-c128-direct-lowall,v2-c512-direct-lowall,v2-c256-direct-lowall-nosave
JAX_DEV_VARIANTS=$V JAX_DEV_SIZES=32768 JAX_DEV_BUDGET_S=45 timeout 60 python3 bench/jax_dev2.py time 2>&1 | grep -E "^time|ERROR"
echo "== XLA_FLAGS=--xla_gpu_triton_gemm_any=true"
XLA_FLAGS=--xla_gpu_triton_gemm_any=true JAX_DEV_VARIANTS=v2-c256-direct-lowall,v2-c128-direct-lowall JAX_DEV_SIZES=32768 \
  JAX_DEV_BUDGET_S=40 timeout 60 python3 bench/jax_dev2.py time 2>&1 | grep -E "^time|ERROR"
