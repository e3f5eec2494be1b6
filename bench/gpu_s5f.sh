# Session 5, score product first (TR 4 / 5: the state update becomes an async wgmma), against TR=3 at
# n=32768, forward and the backward passes, real and compute-only (~1.5 min).
#   LATTNBENCH_COMMIT=<sha> bash bench/gpu_s5f.sh
source bench/gpu_setup.sh
TR_SET=5s TR_SIZES=32768 TR_BUDGET_S=100 timeout 130 python3 bench/triton_tr_dev.py fwd bwd 2>&1 | grep -v "Warn\|warn" | tail -20
