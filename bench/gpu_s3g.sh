# Session 3, final call: the bundled suite (results/h200/bundled.json, committed).
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s3g.sh   (~5 min)
source bench/gpu_setup.sh
timeout 450 lattnbench run suites/bundled.toml --out $OUT --point-timeout 120 2>&1 \
  | tee $OUT/bundled.log | grep -v "━" | grep -v "│       │" | tail -60
