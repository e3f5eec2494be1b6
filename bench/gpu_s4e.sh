# Session 4, confirmation: the final code (auto backward = split at every n) beside cuDNN, fwd / bwd /
# fwd+bwd, B4 H32 D=E=128 bf16 ALiBi, n 512..32768 (results/h200/triton-final2.json).
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s4e.sh
source bench/gpu_setup.sh
timeout 280 lattnbench speed -k lightning/triton,softmax/sdpa-cudnn -n 512..32768 -b 4 --heads 32 \
  -d 128 --dtype bf16 -m fwd,bwd,fwdbwd --decay alibi --budget 0.4 --point-timeout 120 --out $OUT/triton-final2.json 2>&1 \
  | grep -v "━" | grep -v "│       │" | tail -40
