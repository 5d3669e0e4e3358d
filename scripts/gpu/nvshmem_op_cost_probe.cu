// What one NVSHMEM device call costs the thread or block that issues it, on one GPU (one PE: every
// target is the PE itself, reached through its own pointer, so no byte crosses NVLink). These are the
// parts of a one-sided op's time that are not the link's: the issue of a signal or a small put, a
// fence or quiet with a store of the thread's own outstanding, an already satisfied wait. The link's
// part (a store's one-way latency, and the acknowledgement a fence waits for) is the 2-GPU
// calibration's (calibrate/bench_nvshmem.cu: signal_pingpong, put_block).
//
// Each case is one kernel of one block that runs the call `iters` times back to back after a
// warm-up, timed by thread 0 with %globaltimer; per call = elapsed / iters, median over `reps`
// launches. "loop" is the same loop with nothing in it (subtract it).
//
// JSON lines on stdout: {"bench":"nvshmem_op_cost","case":..,"threads":..,"us":per call,"us_min":..,"us_max":..}
// Build: nvcc -O2 -arch=sm_90 -rdc=true -I$NVSHMEM/include -I$MPI/include nvshmem_op_cost_probe.cu
//        -L<libnvshmem_host.so, libnvshmem_device.a> -lnvshmem_host -lnvshmem_device -lmpi
// Run:   mpirun -np 1 ./nvshmem_op_cost_probe [iters] [reps]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
  MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

enum Case { LOOP, SIGNAL_ADD, SIGNAL_SET, PUT8_THREAD, PUT8_NBI_THREAD, STORE_FENCE, STORE_QUIET, FENCE_ALONE,
            QUIET_ALONE, WAIT_SATISFIED, SYNC_BLOCK, PUT1K_BLOCK, PUT_SIGNAL1K_BLOCK, PUT_SIGNAL1K_NBI_BLOCK,
            NCASES };
static const char* NAMES[NCASES] = {"loop", "signal_add", "signal_set", "put8_thread", "put8_nbi_thread",
                                    "store_fence", "store_quiet", "fence_alone", "quiet_alone", "wait_satisfied",
                                    "syncthreads", "put1k_block", "put_signal1k_block", "put_signal1k_nbi_block"};
static bool block_case(int c) { return c >= SYNC_BLOCK; }

__global__ void __launch_bounds__(1024) run_case(int which, char* dst, const char* src, uint64_t* sig, int me,
                                                 int warm, int iters, unsigned long long* out) {
  unsigned long long t0 = 0;
  for (int it = 0; it < warm + iters; it++) {
    if (it == warm) { __syncthreads(); if (threadIdx.x == 0) t0 = gtime(); }
    switch (which) {
      case LOOP: if (threadIdx.x == 0) ((volatile char*)dst)[4096] = (char)it; break;
      case SIGNAL_ADD: if (threadIdx.x == 0) nvshmemx_signal_op(sig, 1, NVSHMEM_SIGNAL_ADD, me); break;
      case SIGNAL_SET: if (threadIdx.x == 0) nvshmemx_signal_op(sig, it, NVSHMEM_SIGNAL_SET, me); break;
      case PUT8_THREAD: if (threadIdx.x == 0) nvshmem_putmem(dst, src, 8, me); break;
      case PUT8_NBI_THREAD: if (threadIdx.x == 0) nvshmem_putmem_nbi(dst, src, 8, me); break;
      case STORE_FENCE:
        if (threadIdx.x == 0) { nvshmem_uint64_p((uint64_t*)dst, it, me); nvshmem_fence(); } break;
      case STORE_QUIET:
        if (threadIdx.x == 0) { nvshmem_uint64_p((uint64_t*)dst, it, me); nvshmem_quiet(); } break;
      case FENCE_ALONE: if (threadIdx.x == 0) nvshmem_fence(); break;
      case QUIET_ALONE: if (threadIdx.x == 0) nvshmem_quiet(); break;
      case WAIT_SATISFIED: if (threadIdx.x == 0) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, 0); break;
      case SYNC_BLOCK: __syncthreads(); break;
      case PUT1K_BLOCK: nvshmemx_putmem_block(dst, src, 1024, me); break;
      case PUT_SIGNAL1K_BLOCK: nvshmemx_putmem_signal_block(dst, src, 1024, sig, 1, NVSHMEM_SIGNAL_ADD, me); break;
      case PUT_SIGNAL1K_NBI_BLOCK:
        nvshmemx_putmem_signal_nbi_block(dst, src, 1024, sig, 1, NVSHMEM_SIGNAL_ADD, me); break;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) *out = gtime() - t0;
}

int main(int argc, char** argv) {
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);  // NVLink multicast stays off
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iters = argc > 1 ? atoi(argv[1]) : 2000, reps = argc > 2 ? atoi(argv[2]) : 11;
  CK(cudaSetDevice(rank));
  nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
  if (rank == 0) nvshmemx_get_uniqueid(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  nvshmemx_set_attr_uniqueid_args(rank, size, &id, &attr);
  if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) { fprintf(stderr, "nvshmem init failed\n"); return 2; }
  int me = nvshmem_my_pe();
  char* dst = (char*)nvshmem_malloc(1 << 16);
  char* src = (char*)nvshmem_malloc(1 << 16);
  uint64_t* sig = (uint64_t*)nvshmem_calloc(1, sizeof(uint64_t));
  unsigned long long* out;
  CK(cudaMalloc(&out, sizeof *out));
  CK(cudaMemset(src, 7, 1 << 16));
  CK(cudaDeviceSynchronize());
  for (int c = 0; c < NCASES; c++) {
    int threads = block_case(c) ? 1024 : 32;
    std::vector<double> us;
    for (int r = 0; r < reps; r++) {
      run_case<<<1, threads>>>(c, dst, src, sig, me, 100, iters, out);
      CK(cudaGetLastError());
      unsigned long long ns;
      CK(cudaMemcpy(&ns, out, sizeof ns, cudaMemcpyDeviceToHost));
      us.push_back(ns * 1e-3 / iters);
    }
    std::sort(us.begin(), us.end());
    if (rank == 0)
      printf("{\"bench\":\"nvshmem_op_cost\",\"case\":\"%s\",\"threads\":%d,\"iters\":%d,\"reps\":%d,"
             "\"us\":%.4f,\"us_min\":%.4f,\"us_max\":%.4f}\n", NAMES[c], threads, iters, reps,
             us[us.size() / 2], us.front(), us.back());
    fflush(stdout);
  }
  nvshmem_free(dst); nvshmem_free(src); nvshmem_free(sig);
  nvshmem_finalize();
  MPI_Finalize();
  return 0;
}
