# Prepared for the next device session (not run yet): re-run the seed README suite with the current kernels,
# in two calls, so the README's seed-readme block (session 1) can be regenerated. Run as
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_next.sh          (first call, ~9 min)
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_next.sh rest     (second call: --resume, after copying the
#                                                                  first call's seed-readme.json to results/h200/)
# fla-core's first backward compile + autotune took > 60 s on the H200 (results/h200/triton-vs-fla.json),
# so the point timeout is 180 s.
source bench/gpu_setup.sh
if [ "$1" = "rest" ]; then
  timeout 540 lattnbench run suites/seed-readme.toml --out results/h200 --resume --point-timeout 180 2>&1 \
    | tee $OUT/seed-readme-rest.log | grep -v "━" | tail -60
  cp results/h200/seed-readme.json results/h200/seed-readme.csv $OUT/ 2>/dev/null
else
  timeout 540 lattnbench run suites/seed-readme.toml --out $OUT --point-timeout 180 2>&1 \
    | tee $OUT/seed-readme.log | grep -v "━" | tail -100
fi
