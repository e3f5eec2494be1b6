# Session 3, final call: the JAX chunked forward, folded vs mask, with the suites' ALiBi decay (dev probe),
# then the bundled suite (results/h200/bundled.json, committed).
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s3f.sh   (~9 min)
source bench/gpu_setup.sh
JAX_DEV_DECAY=alibi JAX_DEV_VARIANTS=v2-c128-mask,v2-c128-fold JAX_DEV_SIZES=32768 JAX_DEV_BUDGET_S=60 \
  timeout 90 python3 bench/jax_dev2.py time 2>&1 | grep "^time" | tail -6
timeout 450 lattnbench run suites/bundled.toml --out $OUT --point-timeout 120 2>&1 \
  | tee $OUT/bundled.log | grep -v "━" | tail -100
