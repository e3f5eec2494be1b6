# Session 4, second call: (1) the transposed pass's decay-on-b variant (TR=2) and the compute-only
# probe beside TR=1 and the row-wise default (n=32768); (2) the triton-peers suite with the new
# autotune lists (row-wise + transposed configs), resumable: a second call with `rest` carries on.
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s4b.sh [rest]
source bench/gpu_setup.sh
if [ "$1" != "rest" ]; then
  TR_SET=2 TR_SIZES=32768 TR_BUDGET_S=90 timeout 120 python3 bench/triton_tr_dev.py fwd bwd 2>&1 | grep -v "Warn\|warn" | tail -30
  mkdir -p $OUT/suite
else
  mkdir -p $OUT/suite && cp results/h200/triton-peers.json results/h200/triton-peers.csv $OUT/suite/ 2>/dev/null
fi
timeout $(( ${S4_SUITE_S:-400} )) lattnbench run suites/triton-peers.toml --out $OUT/suite --resume --point-timeout 180 2>&1 \
  | tee $OUT/triton-peers.log | grep -v "━" | tail -70
