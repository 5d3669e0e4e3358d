"""Calibration: microbenchmarks run on a GPU machine to fit the performance model's constants.

- `bench_nccl.cu`: NCCL collectives and send/recv, eager and CUDA-graph timings, NCCL's own estimate.
- `bench_nvshmem.cu`: NVSHMEM signal latency, put bandwidth over 1..132 blocks, host-issued puts.
- `runner.py`: builds both with nvcc and runs them under mpirun; a standard-library script, run as
  `python clockworks_dist/calibrate/runner.py --out DIR` on the GPU machine. It keeps NVLink
  multicast off in every launch (NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  TORCH_SYMM_MEM_DISABLE_MULTICAST=1), as the shared GPU machines require.
"""
