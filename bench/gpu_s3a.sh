# Session 3, first call: the look-back forward's GPU check + timing, and the small-n fwd+bwd profile.
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s3a.sh   (~8 min)
source bench/gpu_setup.sh
LOOKBACK_BUDGET_S=220 timeout 300 python3 bench/triton_lookback_dev.py 2>&1 | tail -45
SMALLN_BUDGET_S=120 timeout 170 python3 bench/small_n_prof.py 2>&1 | grep -v Warning | head -150
