# Session 5, second call (~3 min): the default config's backward passes compute-only (PROBE=5) beside
# the real ones at n=32768; then Triton's warp specialization of the chunk loop (LIGHTNING_TRITON_WS=1),
# forward and backward passes, against the same configs without it (first part).
#   LATTNBENCH_COMMIT=<sha> bash bench/gpu_s5b.sh
source bench/gpu_setup.sh
TR_SET=5b TR_SIZES=32768 TR_BUDGET_S=80 timeout 110 python3 bench/triton_tr_dev.py fwd bwd 2>&1 | grep -v "Warn\|warn" | tail -12
mv $OUT/triton_tr_dev.json $OUT/triton_tr_dev_5b.json; mv $OUT/triton_tr_dev.log $OUT/triton_tr_dev_5b.log
LIGHTNING_TRITON_WS=1 TR_SET=5w TR_SIZES=32768 TR_BUDGET_S=120 timeout 160 python3 bench/triton_tr_dev.py fwd bwd 2>&1 \
  | grep -v "Warn\|warn" | tail -20
mv $OUT/triton_tr_dev.json $OUT/triton_tr_dev_5w.json; mv $OUT/triton_tr_dev.log $OUT/triton_tr_dev_5w.log
