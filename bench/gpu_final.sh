# The committed H200 run: the seed README suite (check-grad, speed, memory) in one results file.
source bench/gpu_setup.sh
lattnbench list --device cuda 2>&1 | grep -E "lightning|softmax" | cut -c1-100
timeout 540 lattnbench run suites/seed-readme.toml --out $OUT --point-timeout 150 2>&1 \
  | tee $OUT/seed-readme.log | grep -v "━" | tail -150
