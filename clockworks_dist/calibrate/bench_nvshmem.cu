// Calibration microbenchmark: NVSHMEM latency and put bandwidth between PE 0 and PE 1, one process
// per GPU under mpirun, NVSHMEM bootstrapped with a unique id broadcast over MPI.
//
// JSON lines (rank 0, stdout and --out FILE):
//   {"bench":"nvshmem_header", versions, GPU}
//   {"bench":"nvshmem","op":"signal_pingpong","us":one-way,"rtt_us":..,"iters":..}
//       two persistent one-thread kernels bounce a signal (nvshmemx_signal_op SET + nvshmem_signal_wait_until);
//       us = round trip / 2, timed with %globaltimer over `iters` round trips after a warm-up.
//   {"bench":"nvshmem","op":"put_signal_pingpong","bytes":..,"threads":..,"us":one-way,"rtt_us":..}
//       the same with one block issuing nvshmemx_putmem_signal_block of `bytes` each way.
//   {"bench":"nvshmem","op":"put_block","blocks":B,"threads":T,"bytes":..,"us":..,"us_iter":..,"GBps":..}
//       PE 0 splits `bytes` over B blocks, each nvshmemx_putmem_signal_nbi_block(ADD 1) of its chunk; PE 1
//       waits until the signal reaches B and answers with one signal SET; PE 0's blocks wait for that answer
//       before the next transfer (persistent kernels, no launch in the loop). us_iter = time per transfer
//       including the answer; us = us_iter - one-way signal latency = issue until PE 1 observes the signal.
//       Median over `reps` launches of `iters` transfers each.
//   {"bench":"nvshmem","op":"put_block_quiet","blocks":B,"threads":T,"bytes":..,"us":..,"GBps":..}
//       one launch = B blocks nvshmemx_putmem_nbi_block of their chunks, then nvshmem_quiet; launches back to
//       back between CUDA events, per launch (launch gaps included), median of `reps` batches.
//   {"bench":"nvshmem","op":"put_on_stream","bytes":..,"us":..,"GBps":..}
//       host-issued nvshmemx_putmem_on_stream calls back to back, then nvshmemx_quiet_on_stream, per call.
// "correct": the received bytes checked word by word for the configurations marked checked (the
// destination poisoned first); null where not checked.
//
// Build: nvcc -O2 -arch=sm_90 -rdc=true -I$NVSHMEM/include -I$MPI/include bench_nvshmem.cu
//        -L<dir with libnvshmem_host.so and libnvshmem_device.a> -lnvshmem_host -lnvshmem_device -lmpi
// Run:   mpirun -np 2 ./bench_nvshmem [--out FILE] [--min-bytes N] [--max-bytes N] [--blocks 1,4,16,32,132]
//                                     [--multi-min-bytes 65536] [--reps 5] [--pp-iters 10000]
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
#include <nvshmem.h>
#include <nvshmemx.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
  fflush(stderr); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)

static int me, npes;
static FILE* outf = nullptr;

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
__host__ __device__ inline uint32_t pattern(size_t j) { return (uint32_t)(j * 2654435761u) ^ 0x9e3779b9u; }

__global__ void fill_pattern(uint32_t* x, size_t nwords) {
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < nwords; j += (size_t)gridDim.x * blockDim.x)
    x[j] = pattern(j);
}
__global__ void check_pattern(const uint32_t* x, size_t nwords, unsigned long long* bad) {
  unsigned long long local = 0;
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < nwords; j += (size_t)gridDim.x * blockDim.x)
    if (x[j] != pattern(j)) local++;
  if (local) atomicAdd(bad, local);
}

// (a) signal ping-pong: one thread on each of PE 0 and PE 1.
__global__ void signal_pingpong(uint64_t* sig, uint64_t base, int warm, int iters, int peer, int first,
                                unsigned long long* tout) {
  unsigned long long t0 = 0;
  for (int it = 0; it < warm + iters; it++) {
    if (it == warm) t0 = gtime();
    uint64_t v = base + it + 1;
    if (first) { nvshmemx_signal_op(sig, v, NVSHMEM_SIGNAL_SET, peer); nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v); }
    else { nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v); nvshmemx_signal_op(sig, v, NVSHMEM_SIGNAL_SET, peer); }
  }
  if (tout) *tout = gtime() - t0;
}

// (a') put-with-signal ping-pong: one block on each PE.
__global__ void __launch_bounds__(1024) put_signal_pingpong(char* dst, const char* src, size_t bytes, uint64_t* sig, uint64_t base,
                                    int warm, int iters, int peer, int first, unsigned long long* tout) {
  unsigned long long t0 = 0;
  for (int it = 0; it < warm + iters; it++) {
    if (it == warm && threadIdx.x == 0) t0 = gtime();
    uint64_t v = base + it + 1;
    if (first) {
      nvshmemx_putmem_signal_block(dst, src, bytes, sig, v, NVSHMEM_SIGNAL_SET, peer);
      if (threadIdx.x == 0) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v);
      __syncthreads();
    } else {
      if (threadIdx.x == 0) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v);
      __syncthreads();
      nvshmemx_putmem_signal_block(dst, src, bytes, sig, v, NVSHMEM_SIGNAL_SET, peer);
    }
  }
  if (tout && threadIdx.x == 0) *tout = gtime() - t0;
}

// Chunk of block b when `bytes` is split over B blocks (16-byte aligned chunks; trailing blocks may get none).
__device__ __forceinline__ void chunk_of(size_t bytes, int b, int B, size_t* off, size_t* len) {
  size_t c = (bytes + B - 1) / B;
  c = (c + 15) & ~(size_t)15;
  size_t o = (size_t)b * c;
  *off = o;
  *len = o < bytes ? (bytes - o < c ? bytes - o : c) : 0;
}

// (b) put bandwidth, sender side (PE 0): B blocks, persistent over warm + iters transfers.
__global__ void __launch_bounds__(1024, 1) put_sender(char* dst, const char* src, size_t bytes, uint64_t* sig, uint64_t* ack,
                           uint64_t ack_base, int warm, int iters, int peer, unsigned long long* tout) {
  size_t off, len;
  chunk_of(bytes, blockIdx.x, gridDim.x, &off, &len);
  unsigned long long t0 = 0;
  for (int it = 0; it < warm + iters; it++) {
    if (it == warm && blockIdx.x == 0 && threadIdx.x == 0) t0 = gtime();
    if (len) nvshmemx_putmem_signal_nbi_block(dst + off, src + off, len, sig, 1, NVSHMEM_SIGNAL_ADD, peer);
    else if (threadIdx.x == 0) nvshmemx_signal_op(sig, 1, NVSHMEM_SIGNAL_ADD, peer);
    if (threadIdx.x == 0) nvshmem_signal_wait_until(ack, NVSHMEM_CMP_GE, ack_base + it + 1);
    __syncthreads();
  }
  if (tout && blockIdx.x == 0 && threadIdx.x == 0) *tout = gtime() - t0;
}
// (b) receiver side (PE 1): waits for all B chunks of each transfer, then answers.
__global__ void put_receiver(uint64_t* sig, uint64_t sig_base, uint64_t* ack, uint64_t ack_base, int blocks,
                             int total, int peer) {
  if (threadIdx.x != 0) return;
  for (int it = 0; it < total; it++) {
    nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, sig_base + (uint64_t)(it + 1) * blocks);
    nvshmemx_signal_op(ack, ack_base + it + 1, NVSHMEM_SIGNAL_SET, peer);
  }
}
// (b') one-shot put then quiet.
__global__ void __launch_bounds__(1024) put_quiet(char* dst, const char* src, size_t bytes, int peer) {
  size_t off, len;
  chunk_of(bytes, blockIdx.x, gridDim.x, &off, &len);
  if (len) nvshmemx_putmem_nbi_block(dst + off, src + off, len, peer);
  __syncthreads();
  if (threadIdx.x == 0) nvshmem_quiet();
}

static void emit(const char* line) {
  if (me != 0) return;
  printf("%s\n", line); fflush(stdout);
  if (outf) { fprintf(outf, "%s\n", line); fflush(outf); }
}
static std::string num(double x, const char* fmt = "%.3f") {
  if (!std::isfinite(x)) return "null";
  char b[64]; snprintf(b, sizeof b, fmt, x); return b;
}
static std::string jstr(const char* s) {
  if (!s) return "null";
  std::string o = "\"";
  for (const char* p = s; *p; p++) { if (*p == '"' || *p == '\\') o += '\\'; if ((unsigned char)*p >= 32) o += *p; }
  return o + "\"";
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? NAN : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}
static std::vector<long long> split_ints(const char* s) {
  std::vector<long long> v; std::string cur;
  for (const char* p = s; ; p++) {
    if (*p == ',' || *p == 0) { if (!cur.empty()) v.push_back(atoll(cur.c_str())); cur.clear(); if (!*p) break; }
    else cur += *p;
  }
  return v;
}

// Checks the first `bytes` of dst on PE 1 against the pattern; returns the mismatch count (all ranks).
static unsigned long long check_on_pe1(const char* dst, size_t bytes, unsigned long long* bad) {
  unsigned long long nbad = 0;
  if (me == 1) {
    CK(cudaMemset(bad, 0, sizeof *bad));
    check_pattern<<<1024, 256>>>((const uint32_t*)dst, bytes / 4, bad);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
  }
  unsigned long long all = 0;
  MPI_Allreduce(&nbad, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return all;
}
static void poison_on_pe1(char* dst, size_t bytes) {
  if (me == 1) { CK(cudaMemset(dst, 0xff, bytes)); CK(cudaDeviceSynchronize()); }
  nvshmem_barrier_all();
}

int main(int argc, char** argv) {
  // NVLink multicast (NVLS) stays off unless the caller decided otherwise.
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) { fprintf(stderr, "bench_nvshmem needs at least 2 ranks\n"); MPI_Abort(MPI_COMM_WORLD, 1); }

  const char* out_path = nullptr;
  size_t min_bytes = 1024, max_bytes = (size_t)1 << 30, multi_min = 65536;
  std::vector<long long> blocks_list = {1, 4, 16, 32, 132};
  int reps = 5, pp_iters = 10000;   // reps at most 64 (timing slots)
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const char* v = (i + 1 < argc) ? argv[i + 1] : nullptr;
    if (!v) { if (rank == 0) fprintf(stderr, "missing value for %s\n", a.c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
    if (a == "--out") out_path = v;
    else if (a == "--min-bytes") min_bytes = strtoull(v, nullptr, 10);
    else if (a == "--max-bytes") max_bytes = strtoull(v, nullptr, 10);
    else if (a == "--multi-min-bytes") multi_min = strtoull(v, nullptr, 10);
    else if (a == "--blocks") blocks_list = split_ints(v);
    else if (a == "--reps") reps = atoi(v);
    else if (a == "--pp-iters") pp_iters = atoi(v);
    else { if (rank == 0) fprintf(stderr, "unknown argument %s\n", a.c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
    i++;
  }
  reps = std::max(1, std::min(reps, 64));
  if (rank == 0 && out_path) {
    outf = fopen(out_path, "a");
    if (!outf) { fprintf(stderr, "cannot open %s\n", out_path); MPI_Abort(MPI_COMM_WORLD, 1); }
  }

  MPI_Comm node; MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_rank; MPI_Comm_rank(node, &local_rank);
  int ndev; CK(cudaGetDeviceCount(&ndev));
  int dev = local_rank % ndev;
  CK(cudaSetDevice(dev));

  nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
  if (rank == 0) nvshmemx_get_uniqueid(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  nvshmemx_set_attr_uniqueid_args(rank, size, &id, &attr);
  int st = nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
  if (st != 0) { fprintf(stderr, "nvshmemx_init_attr failed: %d\n", st); MPI_Abort(MPI_COMM_WORLD, 4); }
  me = nvshmem_my_pe(); npes = nvshmem_n_pes();
  if (me != rank) { fprintf(stderr, "PE %d != rank %d\n", me, rank); MPI_Abort(MPI_COMM_WORLD, 4); }
  const int peer = me == 0 ? 1 : 0;        // PEs 0 and 1 measure; others only join the barriers
  const bool active = me < 2;

  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, dev));
  const int sms = prop.multiProcessorCount;
  {
    int maj = 0, mnr = 0, pat = 0; nvshmemx_vendor_get_version_info(&maj, &mnr, &pat);
    char name[NVSHMEM_MAX_NAME_LEN] = {0}; nvshmem_info_get_name(name);
    int drv = 0, rt = 0; CK(cudaDriverGetVersion(&drv)); CK(cudaRuntimeGetVersion(&rt));
    char line[2048];
    snprintf(line, sizeof line,
      "{\"bench\":\"nvshmem_header\",\"nvshmem_version\":\"%d.%d.%d\",\"nvshmem_header_version\":\"%d.%d.%d\","
      "\"nvshmem_name\":%s,\"cuda_driver_version\":%d,\"cuda_runtime_version\":%d,\"gpu\":%s,\"sm_count\":%d,"
      "\"npes\":%d,\"reps\":%d,\"pp_iters\":%d,\"nvshmem_disable_nvls\":%s}",
      maj, mnr, pat, NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION, NVSHMEM_VENDOR_PATCH_VERSION,
      jstr(name).c_str(), drv, rt, jstr(prop.name).c_str(), sms, npes, reps, pp_iters,
      jstr(getenv("NVSHMEM_DISABLE_NVLS")).c_str());
    emit(line);
  }

  size_t maxb = max_bytes;
  char* src = (char*)nvshmem_malloc(maxb);
  char* dst = (char*)nvshmem_malloc(maxb);
  uint64_t* sigs = (uint64_t*)nvshmem_calloc(8, sizeof(uint64_t));
  if (!src || !dst || !sigs) { fprintf(stderr, "nvshmem_malloc failed\n"); MPI_Abort(MPI_COMM_WORLD, 5); }
  uint64_t* sig_pp = sigs + 0; uint64_t* sig_pps = sigs + 1; uint64_t* sig_data = sigs + 2; uint64_t* sig_ack = sigs + 3;
  uint64_t base_pp = 0, base_pps = 0, base_data = 0, base_ack = 0;   // the same on every PE
  unsigned long long *tdev, *bad;
  CK(cudaMalloc(&tdev, 64 * sizeof(unsigned long long))); CK(cudaMalloc(&bad, sizeof(unsigned long long)));
  fill_pattern<<<1024, 256>>>((uint32_t*)src, maxb / 4);
  CK(cudaGetLastError()); CK(cudaMemset(dst, 0, maxb)); CK(cudaDeviceSynchronize());
  nvshmem_barrier_all();

  // (a) one-way signal latency
  double oneway_us = NAN;
  {
    int warm = 200;
    std::vector<double> rtts;
    for (int rep = 0; rep < 3; rep++) {
      if (active) signal_pingpong<<<1, 1>>>(sig_pp, base_pp, warm, pp_iters, peer, me == 0, me == 0 ? tdev + rep : nullptr);
      CK(cudaGetLastError());
      base_pp += warm + pp_iters;
      CK(cudaDeviceSynchronize());
      nvshmem_barrier_all();
    }
    unsigned long long t[3] = {0, 0, 0};
    if (me == 0) CK(cudaMemcpy(t, tdev, sizeof t, cudaMemcpyDeviceToHost));
    for (int r = 0; r < 3; r++) rtts.push_back(t[r] / 1e3 / pp_iters);
    double rtt = median(rtts);
    MPI_Bcast(&rtt, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    oneway_us = rtt / 2;
    char line[512];
    snprintf(line, sizeof line,
      "{\"bench\":\"nvshmem\",\"op\":\"signal_pingpong\",\"us\":%s,\"rtt_us\":%s,\"iters\":%d,\"reps\":3,\"npes\":%d}",
      num(oneway_us, "%.4f").c_str(), num(rtt, "%.4f").c_str(), pp_iters, npes);
    emit(line);
  }

  // (a') put-with-signal ping-pong, one block of `pt` threads, a few small sizes
  {
    const int pt = 1024;
    const size_t ppsizes[] = {8, 1024, 8192, 65536};
    for (size_t b : ppsizes) {
      if (b > maxb) continue;
      int iters = std::max(100, pp_iters / 10), warm = 50;
      bool check = b == 8192;
      if (check) poison_on_pe1(dst, b);
      std::vector<double> rtts;
      for (int rep = 0; rep < 3; rep++) {
        if (active) put_signal_pingpong<<<1, pt>>>(dst, src, b, sig_pps, base_pps, warm, iters, peer, me == 0,
                                                   me == 0 ? tdev + rep : nullptr);
        CK(cudaGetLastError());
        base_pps += warm + iters;
        CK(cudaDeviceSynchronize());
        nvshmem_barrier_all();
      }
      unsigned long long t[3] = {0, 0, 0};
      if (me == 0) CK(cudaMemcpy(t, tdev, sizeof t, cudaMemcpyDeviceToHost));
      for (int r = 0; r < 3; r++) rtts.push_back(t[r] / 1e3 / iters);
      double rtt = median(rtts);
      const char* ok = "null";
      if (check) ok = check_on_pe1(dst, b, bad) == 0 ? "true" : "false";
      char line[512];
      snprintf(line, sizeof line,
        "{\"bench\":\"nvshmem\",\"op\":\"put_signal_pingpong\",\"bytes\":%zu,\"threads\":%d,\"us\":%s,\"rtt_us\":%s,"
        "\"iters\":%d,\"reps\":3,\"correct\":%s}",
        b, pt, num(rtt / 2, "%.4f").c_str(), num(rtt, "%.4f").c_str(), iters, ok);
      emit(line);
    }
  }

  // (b) put bandwidth: B blocks, persistent, until PE 1 observes the signal
  int threads = 1024;
  {
    cudaFuncAttributes fa; CK(cudaFuncGetAttributes(&fa, put_sender));
    threads = std::min(1024, fa.maxThreadsPerBlock);
    threads -= threads % 32;
  }
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, put_sender, threads, 0));
  std::vector<size_t> sizes;
  for (size_t b = min_bytes; b <= maxb; b *= 2) sizes.push_back(b);
  size_t max_size = sizes.empty() ? 0 : sizes.back();
  for (long long B : blocks_list) {
    if (B < 1) continue;
    if (B > (long long)per_sm * sms) {   // a persistent grid must be resident as a whole, or it deadlocks
      char line[256];
      snprintf(line, sizeof line, "{\"bench\":\"nvshmem\",\"op\":\"put_block\",\"blocks\":%lld,\"threads\":%d,"
               "\"skipped\":\"more blocks than can be resident (%d per SM x %d SMs)\"}", B, threads, per_sm, sms);
      emit(line);
      continue;
    }
    for (size_t bytes : sizes) {
      if (B > 1 && bytes < multi_min) continue;
      int warm = bytes < ((size_t)1 << 20) ? 3 : 1;
      int iters = (int)std::max<size_t>(2, std::min<size_t>(200, ((size_t)256 << 20) / bytes));
      int nrep = bytes >= ((size_t)256 << 20) ? 3 : reps;
      bool check = (B == 1 && bytes == 1024) || (B == 16 && bytes == ((size_t)4 << 20)) ||
                   (B == blocks_list.back() && bytes == max_size);
      if (check) poison_on_pe1(dst, bytes);
      for (int rep = 0; rep < nrep; rep++) {
        if (me == 0) put_sender<<<(int)B, threads>>>(dst, src, bytes, sig_data, sig_ack, base_ack, warm, iters, peer, tdev + rep);
        else if (me == 1) put_receiver<<<1, 32>>>(sig_data, base_data, sig_ack, base_ack, (int)B, warm + iters, peer);
        CK(cudaGetLastError());
        base_data += (uint64_t)B * (warm + iters);
        base_ack += warm + iters;
        CK(cudaDeviceSynchronize());
      }
      nvshmem_barrier_all();
      unsigned long long t[64] = {0};
      if (me == 0) CK(cudaMemcpy(t, tdev, nrep * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      std::vector<double> per; for (int r = 0; r < nrep; r++) per.push_back(t[r] / 1e3 / iters);
      double us_iter = median(per);
      double us = us_iter - oneway_us;
      const char* ok = "null";
      if (check) ok = check_on_pe1(dst, bytes, bad) == 0 ? "true" : "false";
      char line[768];
      snprintf(line, sizeof line,
        "{\"bench\":\"nvshmem\",\"op\":\"put_block\",\"blocks\":%lld,\"threads\":%d,\"bytes\":%zu,\"us\":%s,"
        "\"us_iter\":%s,\"us_iter_min\":%s,\"us_iter_max\":%s,\"GBps\":%s,\"iters\":%d,\"reps\":%d,\"correct\":%s}",
        B, threads, bytes, num(us).c_str(), num(us_iter).c_str(),
        num(*std::min_element(per.begin(), per.end())).c_str(), num(*std::max_element(per.begin(), per.end())).c_str(),
        num(bytes / us / 1e3).c_str(), iters, nrep, ok);
      emit(line);
    }
  }

  // (b') put then quiet, launches back to back
  {
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    cudaFuncAttributes fa; CK(cudaFuncGetAttributes(&fa, put_quiet));
    int qt = std::min(1024, fa.maxThreadsPerBlock); qt -= qt % 32;
    for (long long B : blocks_list) {
      if (B < 1) continue;
      for (size_t bytes : sizes) {
        if (B > 1 && bytes < multi_min) continue;
        int n = (int)std::max<size_t>(3, std::min<size_t>(100, ((size_t)256 << 20) / bytes));
        std::vector<double> per;
        if (me == 0) {
          for (int w = 0; w < 2; w++) put_quiet<<<(int)B, qt, 0, s>>>(dst, src, bytes, peer);
          CK(cudaGetLastError());
          for (int rep = 0; rep < 3; rep++) {
            CK(cudaEventRecord(e0, s));
            for (int k = 0; k < n; k++) put_quiet<<<(int)B, qt, 0, s>>>(dst, src, bytes, peer);
            CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); per.push_back(ms * 1000.0 / n);
          }
          CK(cudaGetLastError());
        }
        nvshmem_barrier_all();
        double us = median(per);
        char line[512];
        snprintf(line, sizeof line,
          "{\"bench\":\"nvshmem\",\"op\":\"put_block_quiet\",\"blocks\":%lld,\"threads\":%d,\"bytes\":%zu,\"us\":%s,"
          "\"GBps\":%s,\"iters\":%d,\"reps\":3,\"correct\":null}",
          B, qt, bytes, num(us).c_str(), num(bytes / us / 1e3).c_str(), n);
        emit(line);
      }
    }
    // (c) host-issued puts on a stream
    for (size_t bytes = (size_t)1 << 20; bytes <= maxb; bytes *= 4) {
      int n = bytes >= ((size_t)256 << 20) ? 4 : 20;
      bool check = bytes == ((size_t)64 << 20) || (bytes < ((size_t)64 << 20) && bytes * 4 > maxb);
      if (check) poison_on_pe1(dst, bytes);
      std::vector<double> per;
      if (me == 0) {
        nvshmemx_putmem_on_stream(dst, src, bytes, peer, s); nvshmemx_quiet_on_stream(s);
        CK(cudaStreamSynchronize(s));
        for (int rep = 0; rep < 3; rep++) {
          CK(cudaEventRecord(e0, s));
          for (int k = 0; k < n; k++) nvshmemx_putmem_on_stream(dst, src, bytes, peer, s);
          nvshmemx_quiet_on_stream(s);
          CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
          float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); per.push_back(ms * 1000.0 / n);
        }
      }
      nvshmem_barrier_all();
      double us = median(per);
      const char* ok = "null";
      if (check) ok = check_on_pe1(dst, bytes, bad) == 0 ? "true" : "false";
      char line[512];
      snprintf(line, sizeof line,
        "{\"bench\":\"nvshmem\",\"op\":\"put_on_stream\",\"bytes\":%zu,\"us\":%s,\"GBps\":%s,\"iters\":%d,"
        "\"reps\":3,\"correct\":%s}", bytes, num(us).c_str(), num(bytes / us / 1e3).c_str(), n, ok);
      emit(line);
    }
    CK(cudaStreamDestroy(s));
  }

  nvshmem_barrier_all();
  CK(cudaFree(tdev)); CK(cudaFree(bad));
  nvshmem_free(src); nvshmem_free(dst); nvshmem_free(sigs);
  nvshmem_finalize();
  if (outf) fclose(outf);
  MPI_Finalize();
  return 0;
}
