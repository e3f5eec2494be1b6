# Session 3, last call: the current lightning/triton beside fla-core's chunk kernel (and cuDNN), fwd and fwd+bwd,
# B4 H32 D=E=128 bf16 ALiBi, n 512..32768 (results/h200/triton-vs-fla.json).
#   LATTNBENCH_COMMIT=<local sha> bash bench/gpu_s3h.sh   (~4 min)
source bench/gpu_setup.sh
timeout 270 lattnbench speed -k lightning/triton,lightning/fla-chunk,softmax/sdpa-cudnn -n 512..32768 -b 4 --heads 32 \
  -d 128 --dtype bf16 -m fwd,fwdbwd --decay alibi --budget 0.3 --point-timeout 60 --out $OUT/triton-vs-fla.json 2>&1 \
  | grep -v "━" | grep -v "│       │" | tail -40
