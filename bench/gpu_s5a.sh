# Session 5, first call (~4 min): forward configs with descriptors (two 4-warp programs per SM, BT=128)
# beside the TR=1 / TR=3 defaults at n=32768, and the fused dk+dv pass (transposed products, pointer or
# descriptor tiles) against the split dk and dv passes at n=8192 and 32768.
#   LATTNBENCH_COMMIT=<sha> bash bench/gpu_s5a.sh
source bench/gpu_setup.sh
TR_SET=5 TR_SIZES=32768 TR_BUDGET_S=110 timeout 140 python3 bench/triton_tr_dev.py fwd 2>&1 | grep -v "Warn\|warn" | tail -12
mv $OUT/triton_tr_dev.json $OUT/triton_tr_dev_fwd.json 2>/dev/null; mv $OUT/triton_tr_dev.log $OUT/triton_tr_dev_fwd.log 2>/dev/null
TR_SET=5 TR_SIZES=8192,32768 TR_BUDGET_S=150 timeout 180 python3 bench/triton_tr_dev.py dkdv 2>&1 | grep -v "Warn\|warn" | tail -16
