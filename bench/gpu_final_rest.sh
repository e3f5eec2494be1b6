# Second device call of the committed H200 run: resume results/h200/seed-readme.json.
source bench/gpu_setup.sh
timeout 265 lattnbench run bench/seed-readme-rest.toml --out results/h200 --resume 2>&1 \
  | tee $OUT/seed-readme-rest.log | grep -v "━" | tail -60
cp results/h200/seed-readme.json results/h200/seed-readme.csv $OUT/ 2>/dev/null
