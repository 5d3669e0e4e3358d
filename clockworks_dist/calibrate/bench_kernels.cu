// Calibration microbenchmark: what a plain kernel (not NCCL's) costs to start, on one GPU, no MPI.
//
// A generated program's local ops (reduce, copy, fill, compute) are plain kernels, which start
// faster than NCCL's. For each kind below it prints one JSON line (stdout and --out FILE):
//   {"bench":"kernel","op":"kernel_empty","bytes":4,"eager_us":..,"graph_us":..,"iters":..,"spin_us":0,
//    "correct":true}
// - kernel_empty: a one-block kernel that writes one float (the generated fill's launch shape).
//   Eager launches back to back go no faster than the host issues them (the host's cost per launch);
//   in a CUDA graph, the GPU's cost per kernel.
// - kernel_spin: a one-thread kernel that spins for --spin-us on %globaltimer, longer than the host
//   takes to issue a launch, so eager and graph both time the GPU: spin plus the gap between two
//   kernels (eager: the eager launch's gap; graph: the graph's).
// - kernel_reduce: dst[i] = dst[i] + src[i] over `bytes` of float32 (the generated reduce's shape:
//   a grid-stride loop, 256 threads a block, at most 1024 blocks), 1 KiB .. --max-bytes: the
//   rate a plain kernel reaches over HBM (it reads 2 x bytes and writes bytes).
// - eager_us: `iters` launches between two CUDA events, after `warmup` launches, per launch.
// - graph_us: the same launches captured in one CUDA graph; fastest of `graph_reps` replays, per launch.
// - correct: kernel_reduce's output checked exactly (integer-valued floats); null for the others.
// A header line {"bench":"kernel_header",...} gives the versions and the GPU.
//
// Build: nvcc -O2 -arch=sm_90 bench_kernels.cu -o bench_kernels
// Run:   ./bench_kernels [--out FILE] [--device D] [--max-bytes N] [--iters 200] [--iters-large 20]
//                        [--large-bytes 67108864] [--warmup 10] [--graph-reps 3] [--spin-us 50]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
  exit(2); } } while (0)

static FILE* outf = nullptr;

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

__global__ void kernel_empty(float* p) {
  if (threadIdx.x == 0) p[0] = 1.0f;
}

__global__ void kernel_spin(unsigned long long ns) {
  unsigned long long t0 = gtime();
  while (gtime() - t0 < ns) {
  }
}

__global__ void kernel_reduce(float* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = dst[i] + src[i];
}

__global__ void fill_value(float* x, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = v;
}

__global__ void count_not(const float* x, size_t n, float want, unsigned long long* bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (x[i] != want) local++;
  if (local) atomicAdd(bad, local);
}

static int grid_for(size_t n) {  // the generated code's cw_grid(n, 256)
  size_t blocks = (n + 255) / 256;
  return (int)std::max<size_t>(1, std::min<size_t>(blocks, 1024));
}

enum Kind { EMPTY, SPIN, REDUCE };
static const char* kNames[] = {"kernel_empty", "kernel_spin", "kernel_reduce"};

struct Args {
  float* dst;
  const float* src;
  size_t n;
  unsigned long long spin_ns;
};

static void launch(int kind, const Args& a, cudaStream_t s) {
  switch (kind) {
    case EMPTY: kernel_empty<<<1, 256, 0, s>>>(a.dst); break;
    case SPIN: kernel_spin<<<1, 1, 0, s>>>(a.spin_ns); break;
    case REDUCE: kernel_reduce<<<grid_for(a.n), 256, 0, s>>>(a.dst, a.src, a.n); break;
  }
}

static void emit(const char* line) {
  printf("%s\n", line);
  fflush(stdout);
  if (outf) { fprintf(outf, "%s\n", line); fflush(outf); }
}

static std::string str_or_null(const char* s) {
  if (!s) return "null";
  std::string o = "\"";
  for (const char* p = s; *p; p++) { if (*p == '"' || *p == '\\') o += '\\'; if ((unsigned char)*p >= 32) o += *p; }
  return o + "\"";
}

int main(int argc, char** argv) {
  const char* out_path = nullptr;
  int device = 0, iters_small = 200, iters_large = 20, warmup = 10, graph_reps = 3;
  size_t max_bytes = (size_t)1 << 30, large_bytes = (size_t)64 << 20;
  double spin_us = 50.0;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const char* v = (i + 1 < argc) ? argv[i + 1] : nullptr;
    if (!v) { fprintf(stderr, "missing value for %s\n", a.c_str()); return 1; }
    if (a == "--out") out_path = v;
    else if (a == "--device") device = atoi(v);
    else if (a == "--max-bytes") max_bytes = strtoull(v, nullptr, 10);
    else if (a == "--large-bytes") large_bytes = strtoull(v, nullptr, 10);
    else if (a == "--iters") iters_small = atoi(v);
    else if (a == "--iters-large") iters_large = atoi(v);
    else if (a == "--warmup") warmup = atoi(v);
    else if (a == "--graph-reps") graph_reps = atoi(v);
    else if (a == "--spin-us") spin_us = atof(v);
    else { fprintf(stderr, "unknown argument %s\n", a.c_str()); return 1; }
    i++;
  }
  if (iters_small < 1 || iters_large < 1 || graph_reps < 1 || warmup < 0 || !(spin_us > 0) || max_bytes < 1024) {
    fprintf(stderr, "bad arguments: iterations and repetitions must be positive, --spin-us > 0, "
                    "--max-bytes at least 1024\n");
    return 1;
  }
  if (out_path) {
    outf = fopen(out_path, "a");
    if (!outf) { fprintf(stderr, "cannot open %s\n", out_path); return 1; }
  }
  CK(cudaSetDevice(device));
  {
    int drv = 0, rt = 0;
    CK(cudaDriverGetVersion(&drv)); CK(cudaRuntimeGetVersion(&rt));
    cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, device));
    char line[1024];
    snprintf(line, sizeof line,
      "{\"bench\":\"kernel_header\",\"gpu\":%s,\"sm_count\":%d,\"cc\":\"%d.%d\",\"cuda_driver_version\":%d,"
      "\"cuda_runtime_version\":%d,\"device\":%d,\"warmup\":%d,\"iters_small\":%d,\"iters_large\":%d,"
      "\"large_bytes\":%zu,\"graph_reps\":%d,\"spin_us\":%.3f}",
      str_or_null(p.name).c_str(), p.multiProcessorCount, p.major, p.minor, drv, rt, device, warmup, iters_small,
      iters_large, large_bytes, graph_reps, spin_us);
    emit(line);
  }
  float *dst, *src;
  CK(cudaMalloc(&dst, max_bytes)); CK(cudaMalloc(&src, max_bytes));
  unsigned long long* bad; CK(cudaMalloc(&bad, sizeof(unsigned long long)));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));

  struct Case { int kind; size_t bytes; };
  Case cases[64]; int ncases = 0;
  cases[ncases++] = {EMPTY, 4};
  cases[ncases++] = {SPIN, 4};
  for (size_t b = 1024; b <= max_bytes && ncases < 64; b *= 2) cases[ncases++] = {REDUCE, b};

  for (int c = 0; c < ncases; c++) {
    int kind = cases[c].kind;
    size_t bytes = cases[c].bytes, n = bytes / sizeof(float);
    Args a{dst, src, n, (unsigned long long)(spin_us * 1000.0)};
    int iters = bytes >= large_bytes ? iters_large : iters_small;
    if (kind == REDUCE) {  // dst = 0, src = 1: after k launches dst holds k everywhere
      fill_value<<<1024, 256, 0, s>>>(dst, n, 0.0f);
      fill_value<<<1024, 256, 0, s>>>(src, n, 1.0f);
      CK(cudaGetLastError());
    }
    for (int w = 0; w < warmup; w++) launch(kind, a, s);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    float ms = 0;
    CK(cudaEventRecord(e0, s));
    for (int it = 0; it < iters; it++) launch(kind, a, s);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    double eager = ms * 1000.0 / iters;
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int it = 0; it < iters; it++) launch(kind, a, s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
    double best = 1e30;
    for (int rep = 0; rep < graph_reps; rep++) {
      CK(cudaEventRecord(e0, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms * 1000.0 / iters);
    }
    CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
    const char* correct = "null";
    if (kind == REDUCE) {  // warm-up, eager, the warm replay and every timed replay each added 1
      float want = (float)(warmup + iters + iters + iters * graph_reps);
      CK(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), s));
      count_not<<<1024, 256, 0, s>>>(dst, n, want, bad);
      CK(cudaGetLastError());
      unsigned long long nbad = 0;
      CK(cudaMemcpyAsync(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      correct = nbad == 0 ? "true" : "false";
    }
    char line[512];
    snprintf(line, sizeof line,
      "{\"bench\":\"kernel\",\"op\":\"%s\",\"bytes\":%zu,\"eager_us\":%.3f,\"graph_us\":%.3f,\"iters\":%d,"
      "\"spin_us\":%.3f,\"correct\":%s}",
      kNames[kind], bytes, eager, best, iters, kind == SPIN ? spin_us : 0.0, correct);
    emit(line);
  }
  CK(cudaFree(dst)); CK(cudaFree(src)); CK(cudaFree(bad));
  if (outf) fclose(outf);
  return 0;
}
