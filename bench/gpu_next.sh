# Prepared for the next device session (not run yet). Three calls:
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_next.sh            (1: ~3 min) the fused dk+dv pass with
#       transposed products (kernels.py::_dkdv_pass, TRANS=True; AOT: 564 B spill) against the split dk and dv passes
#       (TR=1 / TR=3) at n=8192 and 32768, then lightning/triton beside cuDNN with the final code (the
#       session-4 commit was never run as a whole: results/h200/SESSION4.md);
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_next.sh peers      (2: ~7 min) the triton-peers suite;
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_next.sh peers-rest (3: ~5 min) its --resume, after copying
#       the second call's triton-peers.json to results/h200/.
source bench/gpu_setup.sh
case "$1" in
  peers)
    mkdir -p $OUT/suite
    timeout 560 lattnbench run suites/triton-peers.toml --out $OUT/suite --point-timeout 180 2>&1 \
      | tee $OUT/triton-peers.log | grep -v "━" | tail -40 ;;
  peers-rest)
    mkdir -p $OUT/suite && cp results/h200/triton-peers.json results/h200/triton-peers.csv $OUT/suite/
    timeout 560 lattnbench run suites/triton-peers.toml --out $OUT/suite --resume --point-timeout 180 2>&1 \
      | tee $OUT/triton-peers.log | grep -v "━" | tail -40 ;;
  *)
    TR_SET=3 TR_SIZES=8192,32768 TR_BUDGET_S=100 timeout 130 python3 bench/triton_tr_dev.py dkdv 2>&1 \
      | grep -v "Warn\|warn" | tail -20
    timeout 150 lattnbench speed -k lightning/triton,softmax/sdpa-cudnn -n 512..32768 -b 4 --heads 32 -d 128 \
      --dtype bf16 -m fwd,bwd,fwdbwd --decay alibi --budget 0.3 --point-timeout 90 --out $OUT/triton-final.json 2>&1 \
      | grep -v "━" | grep -v "│       │" | tail -40 ;;
esac
