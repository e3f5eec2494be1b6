# Session 4, last call: the tensor-descriptor transposed pass (TR=3) on the GPU: bf16 check against
# fp64 and do_bench beside TR=1 at n=32768 (fwd, bwd passes); then, with TR=3 in the autotune lists
# (dropped via LIGHTNING_TRITON_TMA=0 if the probe saw any failure), lightning/triton beside cuDNN
# (fwd, bwd, fwd+bwd, n 512..32768) and its bf16 check-grad.
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s4f.sh
source bench/gpu_setup.sh
TR_SET=3 TR_SIZES=32768 TR_BUDGET_S=100 timeout 130 python3 bench/triton_tr_dev.py check fwd bwd 2>&1 | grep -v "Warn\|warn" | grep -v "^ \|^Trace" | tail -30
python3 -c "import json,sys; sys.exit(1 if json.load(open('$OUT/triton_tr_dev.json'))['fail'] else 0)" \
  || { echo "TR=3 probe failed: LIGHTNING_TRITON_TMA=0 for the rest"; export LIGHTNING_TRITON_TMA=0; }
timeout 150 lattnbench speed -k lightning/triton,softmax/sdpa-cudnn -n 512..32768 -b 4 --heads 32 \
  -d 128 --dtype bf16 -m fwd,bwd,fwdbwd --decay alibi --budget 0.3 --point-timeout 90 --out $OUT/triton-final3.json 2>&1 \
  | grep -v "━" | grep -v "│       │" | tail -40
timeout 60 lattnbench check-grad -k lightning/triton -n 1024,4096 -b 2 --heads 8 -d 128 --dtype bf16 \
  --initial-state both --decay alibi --out $OUT/check-grad-bf16-final.json 2>&1 | tail -2
