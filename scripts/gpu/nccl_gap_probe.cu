// Probe: does a process's plain kernel start slower in a CUDA graph once NCCL has run there, and why?
//
// On 2 x H200 an empty kernel in a graph took 0.57-0.65 us per kernel, and 0.75-0.81 us after NCCL
// had run in the process (../shared/reference/h200x2_allreduce_anchors.md; cause not established).
// A generated program is timed beside NCCL in one process, so such a cost lands on every kernel.
// Here, on one GPU and in one process, the graph of 200 empty kernels is timed (best of 7 replays)
// at each stage: before NCCL, after a one-rank communicator's init, after one all-reduce on it,
// after the communicator is destroyed; and, at each stage, also with the kernels launched in the
// remote memory-synchronisation domain (cudaLaunchAttributeMemSyncDomain, as NCCL launches its own).
// Each stage is run with the environment given (the script runs it under a few NCCL settings).
// One JSON line per cell: {"bench":"nccl_gap","stage":..,"domain":..,"per_kernel_us":..,"env":..}
//
// Build: nvcc -O2 -arch=sm_90 -I$NCCL/include nccl_gap_probe.cu -L$NCCL/lib -l:libnccl.so.2 -o nccl_gap_probe
#include <cuda_runtime.h>
#include <nccl.h>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(2); } } while (0)
#define NC(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { \
  fprintf(stderr, "NCCL error %s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); exit(3); } } while (0)

__global__ void empty_kernel(float* p) {
  if (threadIdx.x == 0) p[0] = 1.0f;
}

static const int kKernels = 200, kReps = 7;

static double graph_per_kernel(float* p, cudaStream_t s, bool remote) {
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kKernels; i++) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1); cfg.blockDim = dim3(256); cfg.stream = s;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeMemSyncDomain;
    attr.val.memSyncDomain = remote ? cudaLaunchMemSyncDomainRemote : cudaLaunchMemSyncDomainDefault;
    cfg.attrs = &attr; cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, empty_kernel, p));
  }
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  double best = 1e30;
  for (int r = 0; r < kReps; r++) {
    float ms = 0;
    CK(cudaEventRecord(e0, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, ms * 1000.0 / kKernels);
  }
  CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
  return best;
}

static void report(const char* stage, float* p, cudaStream_t s, const char* env) {
  for (int remote = 0; remote < 2; remote++) {
    double us = graph_per_kernel(p, s, remote);
    printf("{\"bench\":\"nccl_gap\",\"stage\":\"%s\",\"domain\":\"%s\",\"per_kernel_us\":%.3f,\"env\":\"%s\"}\n",
           stage, remote ? "remote" : "default", us, env);
    fflush(stdout);
  }
}

int main(int argc, char** argv) {
  const char* env = argc > 1 ? argv[1] : "";
  for (const char* c = env; *c; c++)
    if (!(isalnum((unsigned char)*c) || *c == '_' || *c == '=' || *c == ' ' || *c == ',')) {
      fprintf(stderr, "the label may hold letters, digits, '_', '=', ',' and spaces only\n");
      return 1;
    }
  CK(cudaSetDevice(0));
  float* p; CK(cudaMalloc(&p, 1 << 20));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  report("before_nccl", p, s, env);
  ncclComm_t comm; ncclUniqueId id;
  NC(ncclGetUniqueId(&id));
  NC(ncclCommInitRank(&comm, 1, id, 0));
  report("after_init", p, s, env);
  NC(ncclAllReduce(p, p + 1024, 1024, ncclFloat, ncclSum, comm, s));
  CK(cudaStreamSynchronize(s));
  report("after_allreduce", p, s, env);
  NC(ncclCommDestroy(comm));
  report("after_destroy", p, s, env);
  CK(cudaFree(p));
  return 0;
}
