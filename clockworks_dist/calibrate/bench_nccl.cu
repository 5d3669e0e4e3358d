// Calibration microbenchmark: NCCL collectives and point-to-point, one process per GPU under mpirun.
//
// For every (op, bytes) it prints one JSON line (on rank 0, to stdout and to --out FILE):
//   {"bench":"nccl","op":"allreduce","bytes":1048576,"eager_us":..,"graph_us":..,"nccl_est_us":..,
//    "busbw_GBps":..,"iters":50,"nchannels_env":null,"ranks":2,"correct":true}
// - bytes: per-rank size as nccl-tests defines it (all-gather: the gathered output; reduce-scatter:
//   the input; all-to-all: the total send size; send/recv: the message).
// - eager_us: `iters` launches back to back between two CUDA events, after `warmup` launches, per launch.
// - graph_us: the same `iters` launches captured in one CUDA graph; fastest of `graph_reps` replays, per launch.
// - Both times are the slowest rank's (MPI_Allreduce MAX).
// - nccl_est_us: NCCL's own prediction for one call (ncclGroupSimulateEnd -> estimatedTime);
//   null for grouped point-to-point calls, where NCCL gives none.
// - correct: the output of that size, after all timed launches, checked exactly on the device against
//   integer-valued float inputs (the buffer is poisoned before the warm-up).
// A header line {"bench":"nccl_header",...} gives the versions and the GPU.
//
// Build: nvcc -O2 -arch=sm_90 -I$NCCL/include -I$MPI/include bench_nccl.cu -L$NCCL/lib -l:libnccl.so.2 -lmpi
// Run:   mpirun -np 2 ./bench_nccl [--out FILE] [--ops a,b] [--sizes 1024,4096] [--min-bytes N] [--max-bytes N]
//                                  [--iters-small 50] [--iters-large 10] [--large-bytes 67108864]
//                                  [--warmup 5] [--graph-reps 3] [--label NAME]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
  fflush(stderr); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)
#define NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { \
  fprintf(stderr, "NCCL error %s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
  fflush(stderr); MPI_Abort(MPI_COMM_WORLD, 3); } } while (0)

enum Op { AR, AG, RS, BC, A2A, SR, SRB, NOPS };
static const char* kNames[NOPS] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                   "alltoall", "sendrecv", "sendrecv_bidir"};

static ncclComm_t comm;
static int rank_, nranks;
static cudaStream_t stream;
static float *sbuf, *rbuf;
static FILE* outf = nullptr;

// Input element i of rank r: a small integer, so every sum below is exact in float32.
__host__ __device__ inline float val(int r, size_t i) { return (float)((r + 1) * 16 + (int)(i % 13)); }

__global__ void fill_input(float* x, size_t n, int r) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = val(r, i);
}

// Counts output elements that differ from the exact expected value of `op`.
// cnt = elements per rank as the op's `bytes` defines; c = cnt / nranks.
__global__ void check_output(int op, const float* y, size_t cnt, int r, int n, unsigned long long* bad) {
  size_t c = cnt / n;
  size_t nout = (op == RS) ? c : cnt;
  if (op == SR && r != 1) return;   // only rank 1 receives in the one-way send/recv
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nout; i += (size_t)gridDim.x * blockDim.x) {
    float e = 0.f;
    switch (op) {
      case AR: for (int q = 0; q < n; q++) e += val(q, i); break;
      case AG: e = val((int)(i / c), i % c); break;
      case RS: for (int q = 0; q < n; q++) e += val(q, (size_t)r * c + i); break;
      case BC: e = val(0, i); break;
      case A2A: e = val((int)(i / c), (size_t)r * c + i % c); break;
      case SR: e = val(0, i); break;
      case SRB: e = val((r - 1 + n) % n, i); break;
    }
    if (y[i] != e) local++;
  }
  if (local) atomicAdd(bad, local);
}

// One call of `op` with `cnt` elements as `bytes` defines them (see the header comment).
static void issue(int op, size_t cnt) {
  size_t c = cnt / nranks;
  switch (op) {
    case AR: NK(ncclAllReduce(sbuf, rbuf, cnt, ncclFloat, ncclSum, comm, stream)); break;
    case AG: NK(ncclAllGather(sbuf, rbuf, c, ncclFloat, comm, stream)); break;
    case RS: NK(ncclReduceScatter(sbuf, rbuf, c, ncclFloat, ncclSum, comm, stream)); break;
    case BC: NK(ncclBroadcast(sbuf, rbuf, cnt, ncclFloat, 0, comm, stream)); break;
    case A2A:
      NK(ncclGroupStart());
      for (int p = 0; p < nranks; p++) {   // self included: NCCL copies locally
        NK(ncclSend(sbuf + p * c, c, ncclFloat, p, comm, stream));
        NK(ncclRecv(rbuf + p * c, c, ncclFloat, p, comm, stream));
      }
      NK(ncclGroupEnd());
      break;
    case SR:   // rank 0 -> rank 1 only; other ranks idle
      if (rank_ == 0) NK(ncclSend(sbuf, cnt, ncclFloat, 1, comm, stream));
      else if (rank_ == 1) NK(ncclRecv(rbuf, cnt, ncclFloat, 0, comm, stream));
      break;
    case SRB:  // every rank sends to the next and receives from the previous (an exchange for 2 ranks)
      NK(ncclGroupStart());
      NK(ncclSend(sbuf, cnt, ncclFloat, (rank_ + 1) % nranks, comm, stream));
      NK(ncclRecv(rbuf, cnt, ncclFloat, (rank_ - 1 + nranks) % nranks, comm, stream));
      NK(ncclGroupEnd());
      break;
  }
}

static double busbw_factor(int op, int n) {
  switch (op) {
    case AR: return 2.0 * (n - 1) / n;
    case AG: case RS: case A2A: return (double)(n - 1) / n;
    default: return 1.0;
  }
}

static void emit(const char* line) {
  if (rank_ != 0) return;
  printf("%s\n", line);
  fflush(stdout);
  if (outf) { fprintf(outf, "%s\n", line); fflush(outf); }
}

static std::string num_or_null(double x, const char* fmt = "%.3f") {
  if (!std::isfinite(x)) return "null";
  char b[64]; snprintf(b, sizeof b, fmt, x); return b;
}

static std::string str_or_null(const char* s) {
  if (!s) return "null";
  std::string o = "\"";
  for (const char* p = s; *p; p++) { if (*p == '"' || *p == '\\') o += '\\'; if ((unsigned char)*p >= 32) o += *p; }
  return o + "\"";
}

static std::vector<std::string> split(const char* s) {
  std::vector<std::string> v; std::string cur;
  for (const char* p = s; ; p++) {
    if (*p == ',' || *p == 0) { if (!cur.empty()) v.push_back(cur); cur.clear(); if (!*p) break; }
    else cur += *p;
  }
  return v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks < 2) { fprintf(stderr, "bench_nccl needs at least 2 ranks\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  // NVLink multicast (NVLS) stays off unless the caller decided otherwise.
  setenv("NCCL_NVLS_ENABLE", "0", 0);

  const char* out_path = nullptr; const char* ops_arg = nullptr; const char* sizes_arg = nullptr;
  const char* label = "default";
  size_t min_bytes = 1024, max_bytes = (size_t)1 << 30, large_bytes = (size_t)64 << 20;
  int iters_small = 50, iters_large = 10, warmup = 5, graph_reps = 3;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const char* v = (i + 1 < argc) ? argv[i + 1] : nullptr;
    if (!v) { if (rank_ == 0) fprintf(stderr, "missing value for %s\n", a.c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
    if (a == "--out") out_path = v;
    else if (a == "--ops") ops_arg = v;
    else if (a == "--sizes") sizes_arg = v;
    else if (a == "--label") label = v;
    else if (a == "--min-bytes") min_bytes = strtoull(v, nullptr, 10);
    else if (a == "--max-bytes") max_bytes = strtoull(v, nullptr, 10);
    else if (a == "--large-bytes") large_bytes = strtoull(v, nullptr, 10);
    else if (a == "--iters-small") iters_small = atoi(v);
    else if (a == "--iters-large") iters_large = atoi(v);
    else if (a == "--warmup") warmup = atoi(v);
    else if (a == "--graph-reps") graph_reps = atoi(v);
    else { if (rank_ == 0) fprintf(stderr, "unknown argument %s\n", a.c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
    i++;
  }
  std::vector<int> ops;
  if (ops_arg) {
    for (auto& s : split(ops_arg)) {
      int k = -1; for (int o = 0; o < NOPS; o++) if (s == kNames[o]) k = o;
      if (k < 0) { if (rank_ == 0) fprintf(stderr, "unknown op %s\n", s.c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
      ops.push_back(k);
    }
  } else for (int o = 0; o < NOPS; o++) ops.push_back(o);
  std::vector<size_t> sizes;
  if (sizes_arg) for (auto& s : split(sizes_arg)) sizes.push_back(strtoull(s.c_str(), nullptr, 10));
  else for (size_t b = min_bytes; b <= max_bytes; b *= 2) sizes.push_back(b);
  size_t maxb = 0;
  for (size_t b : sizes) {
    if (b % (sizeof(float) * nranks) != 0) { if (rank_ == 0) fprintf(stderr, "size %zu not a multiple of 4*ranks\n", b); MPI_Abort(MPI_COMM_WORLD, 1); }
    maxb = std::max(maxb, b);
  }
  if (rank_ == 0 && out_path) {
    outf = fopen(out_path, "a");
    if (!outf) { fprintf(stderr, "cannot open %s\n", out_path); MPI_Abort(MPI_COMM_WORLD, 1); }
  }

  // One GPU per rank: the rank's index among the ranks of its node.
  MPI_Comm node; MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  int local_rank; MPI_Comm_rank(node, &local_rank);
  int ndev; CK(cudaGetDeviceCount(&ndev));
  int dev = local_rank % ndev;
  CK(cudaSetDevice(dev));

  ncclUniqueId id;
  if (rank_ == 0) NK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  NK(ncclCommInitRank(&comm, nranks, id, rank_));

  {  // header: versions and the GPU
    int nccl_ver = 0, drv = 0, rt = 0; NK(ncclGetVersion(&nccl_ver));
    CK(cudaDriverGetVersion(&drv)); CK(cudaRuntimeGetVersion(&rt));
    cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, dev));
    int peer_access = -1;
    if (ndev > 1) CK(cudaDeviceCanAccessPeer(&peer_access, dev, (dev + 1) % ndev));
    const char* nch = getenv("NCCL_MAX_NCHANNELS");
    char line[2048];
    snprintf(line, sizeof line,
      "{\"bench\":\"nccl_header\",\"label\":%s,\"nccl_version_code\":%d,\"nccl_version\":\"%d.%d.%d\","
      "\"nccl_header_version_code\":%d,\"cuda_driver_version\":%d,\"cuda_runtime_version\":%d,"
      "\"gpu\":%s,\"sm_count\":%d,\"cc\":\"%d.%d\",\"gpu_mem_bytes\":%zu,\"l2_bytes\":%d,"
      "\"devices_visible\":%d,\"peer_access\":%d,\"ranks\":%d,\"nchannels_env\":%s,"
      "\"warmup\":%d,\"iters_small\":%d,\"iters_large\":%d,\"large_bytes\":%zu,\"graph_reps\":%d}",
      str_or_null(label).c_str(), nccl_ver, nccl_ver / 10000, (nccl_ver % 10000) / 100, nccl_ver % 100,
      NCCL_VERSION_CODE, drv, rt, str_or_null(p.name).c_str(), p.multiProcessorCount, p.major, p.minor,
      (size_t)p.totalGlobalMem, p.l2CacheSize, ndev, peer_access, nranks, str_or_null(nch).c_str(),
      warmup, iters_small, iters_large, large_bytes, graph_reps);
    emit(line);
  }

  CK(cudaMalloc(&sbuf, maxb)); CK(cudaMalloc(&rbuf, maxb));
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  fill_input<<<1024, 256, 0, stream>>>(sbuf, maxb / sizeof(float), rank_);
  CK(cudaGetLastError());
  unsigned long long* bad; CK(cudaMalloc(&bad, sizeof(unsigned long long)));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  CK(cudaStreamSynchronize(stream));
  const char* nch = getenv("NCCL_MAX_NCHANNELS");

  for (int op : ops) {
    for (size_t bytes : sizes) {
      size_t cnt = bytes / sizeof(float);
      // NCCL's own estimate (collectives only)
      double est = NAN;
      if (op <= BC) {
        ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
        NK(ncclGroupStart()); issue(op, cnt); NK(ncclGroupSimulateEnd(&sim));
        if (sim.estimatedTime > 0) est = sim.estimatedTime;
      }
      // poison the output, then warm up
      CK(cudaMemsetAsync(rbuf, 0xff, bytes, stream));
      for (int w = 0; w < warmup; w++) issue(op, cnt);
      CK(cudaStreamSynchronize(stream));
      MPI_Barrier(MPI_COMM_WORLD);
      int iters = bytes >= large_bytes ? iters_large : iters_small;
      // eager
      float ms;
      CK(cudaEventRecord(e0, stream));
      for (int it = 0; it < iters; it++) issue(op, cnt);
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms, e0, e1));
      double eager = ms * 1000.0 / iters;
      // graph: capture `iters` launches, replay once to warm, then take the fastest of graph_reps replays
      cudaGraph_t g; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      for (int it = 0; it < iters; it++) issue(op, cnt);
      CK(cudaStreamEndCapture(stream, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      CK(cudaGraphLaunch(ge, stream)); CK(cudaStreamSynchronize(stream));
      MPI_Barrier(MPI_COMM_WORLD);
      double best = 1e30;
      for (int rep = 0; rep < graph_reps; rep++) {
        CK(cudaEventRecord(e0, stream)); CK(cudaGraphLaunch(ge, stream)); CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1));
        best = std::min(best, ms * 1000.0 / iters);
      }
      CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
      // exact check of this size's output
      CK(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), stream));
      check_output<<<1024, 256, 0, stream>>>(op, rbuf, cnt, rank_, nranks, bad);
      CK(cudaGetLastError());
      unsigned long long nbad = 0;
      CK(cudaMemcpyAsync(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost, stream));
      CK(cudaStreamSynchronize(stream));
      double t[2] = {eager, best}, tmax[2];
      MPI_Allreduce(t, tmax, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      unsigned long long allbad = 0;
      MPI_Allreduce(&nbad, &allbad, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      double busbw = bytes / tmax[0] / 1e3 * busbw_factor(op, nranks);   // GB/s from eager
      char line[1024];
      snprintf(line, sizeof line,
        "{\"bench\":\"nccl\",\"label\":%s,\"op\":\"%s\",\"bytes\":%zu,\"eager_us\":%s,\"graph_us\":%s,"
        "\"nccl_est_us\":%s,\"busbw_GBps\":%s,\"iters\":%d,\"nchannels_env\":%s,\"ranks\":%d,"
        "\"correct\":%s,\"mismatches\":%llu}",
        str_or_null(label).c_str(), kNames[op], bytes, num_or_null(tmax[0]).c_str(), num_or_null(tmax[1]).c_str(),
        num_or_null(est).c_str(), num_or_null(busbw).c_str(), iters, str_or_null(nch).c_str(), nranks,
        allbad == 0 ? "true" : "false", allbad);
      emit(line);
    }
  }
  CK(cudaFree(bad)); CK(cudaFree(sbuf)); CK(cudaFree(rbuf));
  NK(ncclCommDestroy(comm));
  if (outf) fclose(outf);
  MPI_Finalize();
  return 0;
}
