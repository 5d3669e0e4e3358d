// Probe: what programmatic dependent launch (PDL) saves between consecutive kernels on one GPU, and
// whether it combines with a cooperative launch (the generated NVSHMEM kernels are cooperative).
//
// A generated NVSHMEM program launches one kernel per call. In a CUDA graph the gap between two such
// kernels was measured at 0.93 us on H200 (../shared/reference/h200x2_allreduce_anchors.md). PDL lets
// the next kernel be launched while the previous one runs; the next kernel's `griddepcontrol.wait`
// returns only once the previous grid has completed and its memory is visible, so every memory access
// after that instruction is ordered exactly as under plain stream order. Only what precedes the wait
// (block scheduling, parameter loads) overlaps.
//
// Each launch: after the wait (when PDL is on) and the trigger, block 0's thread 0 adds 1 to a counter
// (a plain read-modify-write, correct only if consecutive kernels do not overlap past the wait), every
// block spins --spin-us on %globaltimer, and cooperative variants end with a grid-wide sync.
// Variants: plain (<<<>>>), pdl, coop (cooperative attribute and a grid-wide sync at the end), coop_pdl
// (both attributes), coop_nosync (the cooperative attribute, no grid-wide sync: the attribute alone).
// Modes: eager (N launches between two events) and graph (the N launches captured; best of reps).
// One JSON line per cell (stdout and --out FILE):
//   {"bench":"pdl","variant":..,"mode":..,"grid":..,"threads":..,"spin_us":..,"launches":..,
//    "per_launch_us":..,"gap_us":..,"correct":..,"error":..}
// gap_us = per_launch_us - spin_us: the cost between two kernels that the launch adds.
//
// Build: nvcc -O2 -arch=sm_90 pdl_probe.cu -o pdl_probe
// Run:   ./pdl_probe [--out FILE] [--launches 50] [--reps 5]
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace cg = cooperative_groups;

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
  exit(2); } } while (0)

static FILE* outf = nullptr;

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

template <bool kPdl, bool kCoop, bool kSync = kCoop>
__global__ void step(unsigned long long spin_ns, int* counter) {
  if (kPdl) {
    // Everything below waits for the previous grid's completion and memory flush (stream order).
    asm volatile("griddepcontrol.wait;" ::: "memory");
    // Let the next kernel be launched now; its own wait keeps its accesses after this grid.
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *counter = *counter + 1;
  unsigned long long t0 = gtime();
  while (gtime() - t0 < spin_ns) {
  }
  if (kSync) cg::this_grid().sync();
}

struct Variant { const char* name; bool pdl; bool coop; void* fn; };

static cudaError_t launch(const Variant& v, int grid, int threads, unsigned long long ns, int* counter,
                          cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.stream = s;
  cudaLaunchAttribute attrs[2];
  int na = 0;
  if (v.pdl) {
    attrs[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[na].val.programmaticStreamSerializationAllowed = 1;
    na++;
  }
  if (v.coop) {
    attrs[na].id = cudaLaunchAttributeCooperative;
    attrs[na].val.cooperative = 1;
    na++;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = na;
  void* args[] = {&ns, &counter};
  return cudaLaunchKernelExC(&cfg, v.fn, args);
}

static void emit(const std::string& line) {
  printf("%s\n", line.c_str());
  fflush(stdout);
  if (outf) { fprintf(outf, "%s\n", line.c_str()); fflush(outf); }
}

int main(int argc, char** argv) {
  const char* out_path = nullptr;
  int launches = 50, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--out") out_path = argv[i + 1];
    else if (a == "--launches") launches = atoi(argv[i + 1]);
    else if (a == "--reps") reps = atoi(argv[i + 1]);
    else { fprintf(stderr, "unknown argument %s\n", a.c_str()); return 1; }
  }
  if (launches < 2 || reps < 1) { fprintf(stderr, "--launches >= 2, --reps >= 1\n"); return 1; }
  if (out_path && !(outf = fopen(out_path, "a"))) { fprintf(stderr, "cannot open %s\n", out_path); return 1; }
  CK(cudaSetDevice(0));
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0));
  Variant variants[] = {
    {"plain", false, false, (void*)step<false, false>},
    {"pdl", true, false, (void*)step<true, false>},
    {"coop", false, true, (void*)step<false, true>},
    {"coop_pdl", true, true, (void*)step<true, true>},
    // the cooperative attribute alone, no grid-wide sync in the kernel: what the attribute costs
    {"coop_nosync", false, true, (void*)step<false, true, false>},
  };
  const int threads = 256;
  int resident = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, step<true, true>, threads, 0));
  int full = resident * p.multiProcessorCount;
  {
    char line[512];
    snprintf(line, sizeof line, "{\"bench\":\"pdl_header\",\"gpu\":\"%s\",\"sm_count\":%d,\"resident_per_sm\":%d,"
             "\"threads\":%d,\"launches\":%d,\"reps\":%d}", p.name, p.multiProcessorCount, resident, threads,
             launches, reps);
    emit(line);
  }
  int* counter; CK(cudaMalloc(&counter, sizeof(int)));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<int> grids = {1, 32, p.multiProcessorCount, full};
  std::vector<double> spins = {0.0, 2.0, 10.0};
  for (double spin_us : spins) {
    for (int grid : grids) {
      for (const Variant& v : variants) {
        for (int graph = 0; graph < 2; graph++) {
          unsigned long long ns = (unsigned long long)(spin_us * 1000.0);
          std::string error;
          double best = 1e30;
          long expect = 0;
          bool ok = true;
          CK(cudaMemsetAsync(counter, 0, sizeof(int), s));
          cudaGraphExec_t ge = nullptr;
          if (graph) {
            cudaGraph_t g;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            cudaError_t le = cudaSuccess;
            for (int i = 0; i < launches && le == cudaSuccess; i++) le = launch(v, grid, threads, ns, counter, s);
            cudaError_t ce = cudaStreamEndCapture(s, &g);
            if (le != cudaSuccess || ce != cudaSuccess) {
              error = cudaGetErrorString(le != cudaSuccess ? le : ce);
              ok = false;
            } else {
              cudaError_t ie = cudaGraphInstantiate(&ge, g, 0);
              CK(cudaGraphDestroy(g));
              if (ie != cudaSuccess) { error = cudaGetErrorString(ie); ok = false; ge = nullptr; }
            }
            (void)cudaGetLastError();
          }
          for (int r = 0; ok && r <= reps; r++) {  // r == 0 is a warm-up
            CK(cudaEventRecord(e0, s));
            cudaError_t le = cudaSuccess;
            if (graph) le = cudaGraphLaunch(ge, s);
            else for (int i = 0; i < launches && le == cudaSuccess; i++) le = launch(v, grid, threads, ns, counter, s);
            CK(cudaEventRecord(e1, s));
            cudaError_t se = cudaEventSynchronize(e1);
            if (le != cudaSuccess || se != cudaSuccess) {
              error = cudaGetErrorString(le != cudaSuccess ? le : se);
              ok = false;
              break;
            }
            expect += launches;
            float ms = 0; CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r > 0) best = std::min(best, ms * 1000.0 / launches);
          }
          if (ge) CK(cudaGraphExecDestroy(ge));
          (void)cudaGetLastError();
          int got = -1;
          std::string correct = "null";
          if (ok) {
            CK(cudaMemcpy(&got, counter, sizeof got, cudaMemcpyDeviceToHost));
            correct = got == expect ? "true" : "false";
          }
          char line[768];
          if (ok)
            snprintf(line, sizeof line, "{\"bench\":\"pdl\",\"variant\":\"%s\",\"mode\":\"%s\",\"grid\":%d,\"threads\":%d,"
                     "\"spin_us\":%.1f,\"launches\":%d,\"per_launch_us\":%.3f,\"gap_us\":%.3f,\"correct\":%s,"
                     "\"counter\":%d,\"expected\":%ld,\"error\":null}", v.name, graph ? "graph" : "eager", grid,
                     threads, spin_us, launches, best, best - spin_us, correct.c_str(), got, expect);
          else
            snprintf(line, sizeof line, "{\"bench\":\"pdl\",\"variant\":\"%s\",\"mode\":\"%s\",\"grid\":%d,\"threads\":%d,"
                     "\"spin_us\":%.1f,\"launches\":%d,\"per_launch_us\":null,\"gap_us\":null,\"correct\":null,"
                     "\"error\":\"%s\"}", v.name, graph ? "graph" : "eager", grid, threads, spin_us, launches,
                     error.c_str());
          emit(line);
          if (!ok) {  // a sticky error would poison every later cell: say so and stop
            cudaError_t st = cudaDeviceSynchronize();
            if (st != cudaSuccess) { fprintf(stderr, "sticky error: %s\n", cudaGetErrorString(st)); return 3; }
          }
        }
      }
    }
  }
  CK(cudaFree(counter));
  if (outf) fclose(outf);
  return 0;
}
