# Session-2 GPU call 5: lean backward (alignment/stream passed in): bit-identity + host wall, then small-n speed.
source bench/gpu_setup.sh
DEV2_BUDGET_S=60 timeout 90 python3 bench/triton_dev2.py fast 2>&1 | grep "^\[" | tail -14
timeout 200 lattnbench speed -k 'lightning/triton,softmax/sdpa-cudnn,softmax/sdpa-flash' -n 512..4096 -m fwd,bwd,fwdbwd \
  --out $OUT/speed-small.json 2>&1 | grep -v "━" | tail -45
