# Session 5, the final runs. Two calls:
#   LATTNBENCH_COMMIT=<sha> bash bench/gpu_s5c.sh          (1: ~9 min) the dev probe of the default config
#       (fwd and each backward pass, real and compute-only, n=32768: the BWD_STATE decay change), then
#       the triton-peers suite (lightning/triton beside fla, the official kernel and cuDNN) until 480 s;
#   LATTNBENCH_COMMIT=<sha> bash bench/gpu_s5c.sh rest     (2: ~5 min) its --resume, after copying the first
#       call's suite/triton-peers.json and .csv to results/h200/.
source bench/gpu_setup.sh
mkdir -p $OUT/suite
case "$1" in
  rest)
    cp results/h200/triton-peers.json results/h200/triton-peers.csv $OUT/suite/
    timeout 540 lattnbench run suites/triton-peers.toml --out $OUT/suite --resume --point-timeout 180 2>&1 \
      | tee $OUT/triton-peers.log | grep -v "━" | tail -40 ;;
  *)
    TR_SET=5b TR_SIZES=32768 TR_BUDGET_S=60 timeout 90 python3 bench/triton_tr_dev.py fwd bwd 2>&1 | grep -v "Warn\|warn" | tail -9
    timeout 480 lattnbench run suites/triton-peers.toml --out $OUT/suite --point-timeout 180 2>&1 \
      | tee $OUT/triton-peers.log | grep -v "━" | tail -30 ;;
esac
