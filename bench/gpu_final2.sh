# Session-2 final call: the JAX chunked variants named in $1 at n=32768 (dev script), then the
# bundled suite (results/h200/bundled.json, committed) and a memory/speed check of the big JAX.
source bench/gpu_setup.sh  # pass LATTNBENCH_COMMIT=<local HEAD> in the run command: the copied .git can be stale
if [ -n "$1" ]; then
  JAX_DEV_VARIANTS="$1" JAX_DEV_SIZES=32768 JAX_DEV_BUDGET_S=${2:-90} timeout 150 python3 bench/jax_dev2.py time \
    2>&1 | grep "^time" | tail -20
fi
timeout 430 lattnbench run suites/bundled.toml --out $OUT --point-timeout 120 2>&1 \
  | tee $OUT/bundled.log | grep -v "━" | tail -110
