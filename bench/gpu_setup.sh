# Sourced at the start of every device run: install the project and the carried wheels.
# (The GPU image has torch, triton, jax; jax-triton, fla-core and lightning-attn come as wheels.)
set -o pipefail
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || { echo "install failed"; exit 1; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
    && export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv
