# Session 4, confirmation of the final code (TR=3 only beyond 4096 tokens): lightning/triton beside
# cuDNN, fwd / bwd / fwd+bwd, n 512..32768 (results/h200/triton-final.json).
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s4g.sh
source bench/gpu_setup.sh
timeout 100 lattnbench speed -k lightning/triton,softmax/sdpa-cudnn -n 512..32768 -b 4 --heads 32 \
  -d 128 --dtype bf16 -m fwd,bwd,fwdbwd --decay alibi --budget 0.25 --point-timeout 60 --out $OUT/triton-final4.json 2>&1 \
  | grep -v "━" | grep -v "│       │" | tail -40
