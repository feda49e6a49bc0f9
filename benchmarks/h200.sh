#!/usr/bin/env bash
# Runs benchmarks/compare.py --gpu on the H200 device machine: bash benchmarks/h200.sh [compare.py args...]
# (bash benchmarks/h200.sh --sweep [matmul_sweep.py args...] runs the matmul variant sweep instead;
#  bash benchmarks/h200.sh --calibration [calibration.py args...] the cost-model calibration and cold compiles;
#  bash benchmarks/h200.sh --variants [cuda_variants.py args...] every CUDA variant of some workloads' kernels;
#  bash benchmarks/h200.sh --tests [pytest args...] the GPU tests;
#  bash benchmarks/h200.sh --end-to-end [end_to_end.py args...] where a plan's end-to-end time goes, --gpu;
#  bash benchmarks/h200.sh --downloads [--dropped] what each GPU->host copy path costs, download_paths.py;
#  bash benchmarks/h200.sh --uploads what each host->GPU copy path costs, upload_paths.py;
#  bash benchmarks/h200.sh --grouped swiglu's two up-projections as one cuBLAS launch or two, grouped_gemm.py;
#  bash benchmarks/h200.sh --host-launch [SAMPLE ...] a host plan's native launch in each condition, host_launch.py)
# Expects cp312 wheels of pyopencl, pytools, platformdirs, siphash24, graphviz (and tinygrad) in .wheels/ (carried).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 ZYX_EXPLORE_CACHE=/tmp/zx-cache
mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd && cp /etc/OpenCL/vendors/*.icd /tmp/icd/ 2>/dev/null
export OCL_ICD_VENDORS=/tmp/icd
nvrtc=$(python3 -c 'import nvidia.cuda_nvrtc, os; print(os.path.dirname(nvidia.cuda_nvrtc.__file__))' 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${nvrtc:+$nvrtc/lib:}${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
case "${1:-}" in
  --calibration) run=(benchmarks/calibration.py --gpu) ;;
  --variants) run=(benchmarks/cuda_variants.py) ;;
  --end-to-end) run=(benchmarks/end_to_end.py --gpu) ;;
  --downloads) run=(benchmarks/download_paths.py) ;;
  --uploads) run=(benchmarks/upload_paths.py) ;;
  --grouped) run=(benchmarks/grouped_gemm.py) ;;
  --host-launch) run=(benchmarks/host_launch.py) ;;
  --sweep) run=(benchmarks/matmul_sweep.py) ;;
  --tests) run=(-m pytest --noconftest -o addopts= -p no:cacheprovider tests/test_cuda_blas.py tests/test_cuda_gemm.py) ;;
  *) run=(benchmarks/compare.py --gpu); set -- "" "$@" ;;
esac
shift
python3 "${run[@]}" "$@"
