# Issue 2's GPU run: softmax baselines, speed and memory at the seed README's shape.
source bench/gpu_setup.sh
SHAPE="--n 512..32768 --batch 4 --heads 32 --dim 128 --dtype bf16"
lattnbench env --json > $OUT/env.json
lattnbench list --device cuda 2>&1 | tail -30
lattnbench speed $SHAPE --kernels 'softmax/*' --out $OUT/softmax-speed.json 2>&1 | tee $OUT/speed.log | grep -v "━"
lattnbench memory $SHAPE --kernels 'softmax/*' --out $OUT/softmax-memory.json 2>&1 | tee $OUT/memory.log | grep -v "━"
