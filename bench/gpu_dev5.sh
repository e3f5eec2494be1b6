# Session-2 GPU call 4: Python speed inside the autograd device thread; per-kernel GPU time of the JAX path.
source bench/gpu_setup.sh
DEV2_BUDGET_S=40 timeout 60 python3 bench/triton_dev2.py thread 2>&1 | grep "^\[" | tail -6
JAX_PROF_VARIANTS=new-c256-lowpart,new-c256 timeout 400 python3 bench/jax_prof.py 2>&1 | tail -120
