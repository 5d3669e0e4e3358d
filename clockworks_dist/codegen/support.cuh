// ---------------------------------------------------------------------------------------------
// Runtime support: the same in every generated program (clockworks_dist/codegen/support.cuh).
// Inputs, arithmetic and the opaque kernels follow clockworks_dist/runtime/numeric.py exactly, so
// every element can be compared bit for bit with the checker's values.
// ---------------------------------------------------------------------------------------------
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <string>
#include <vector>
#include <algorithm>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <mpi.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

enum CwDtype { CW_F16, CW_BF16, CW_F32, CW_F64, CW_I32, CW_I64, CW_U32, CW_U64 };
enum CwReduce { CW_SUM, CW_PROD, CW_MAX, CW_MIN };
static const size_t CW_ITEMSIZE[] = {2, 2, 4, 8, 4, 8, 4, 8};

struct CwBuf {         // one buffer of this rank
  const char* name;    // as in the schedule
  int dtype;           // CwDtype
  size_t count;        // elements
  uint64_t base;       // the input formula's key: mix((rank << 32) + crc32(name))
  int symmetric;       // index into the symmetric allocations, or -1
  void* ptr;           // device memory
  void* ended = nullptr;  // an output's copy as the rank's program ended (the NVSHMEM backend), or none
};
struct CwOpInfo { const char* text; const char* file; int line; };
struct CwSym { const char* name; size_t bytes; };

// Progress file fields and phases (clockworks_dist/runtime/progress.py).
enum { CW_F_PID, CW_F_PHASE, CW_F_SCHEDULE, CW_F_ITERATION, CW_F_OP, CW_F_MEMBER, CW_F_BEAT, CW_FIELDS };
enum { CW_NOT_STARTED, CW_SETUP, CW_RUNNING, CW_SETTLING, CW_COMPARING, CW_DONE, CW_FINISHED };
static const char* CW_PHASE_NAMES[] = {"not_started", "setup", "running", "settling", "comparing", "done",
                                       "finished"};

static int cw_rank = -1, cw_world = 0;
static std::string cw_job;                // --job DIR ("" without)
static int cw_iters = 20, cw_warmup = 2, cw_graph = 1;
static int cw_host_progress = 0;  // --host-progress: NVSHMEM kernels write their progress words to host memory
static double cw_timeout = 60.0;
static int64_t cw_row_local[CW_FIELDS];
static int64_t* cw_row = cw_row_local;    // this rank's row of the progress file
static volatile uint32_t* cw_marks = nullptr;  // host-mapped progress words: [0] op + 1, [1 + b] block b's
static uint32_t* cw_marks_dev = nullptr;
static int cw_mark_words = 1;
// cuStreamWriteValue32, reached through the runtime (no link to the driver library): null where the
// driver does not give it, and then a one-thread kernel writes the progress word instead.
typedef CUresult (*CwWriteValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
static CwWriteValue32 cw_write_value32 = nullptr;
static volatile sig_atomic_t cw_stop_signal = 0;
static std::string cw_status_detail;

static double cw_now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void cw_json_str(std::string& out, const char* s) {
  out += '"';
  for (const unsigned char* p = (const unsigned char*)s; *p; ++p) {
    if (*p == '"' || *p == '\\') { out += '\\'; out += (char)*p; }
    else if (*p < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", *p); out += b; }
    else out += (char)*p;
  }
  out += '"';
}

static void cw_json_num(std::string& out, double v) {
  char b[40];
  snprintf(b, sizeof b, "%.9g", v);
  out += b;
}

static void cw_beat() {
  cw_row[CW_F_BEAT] = (int64_t)(cw_now() * 1e6);
}

static void cw_phase(int phase) {
  cw_row[CW_F_PHASE] = phase;
  cw_beat();
}

static void cw_open_progress() {
  if (cw_job.empty()) return;
  std::string path = cw_job + "/progress.bin";
  int fd = open(path.c_str(), O_RDWR);
  if (fd < 0) return;  // no launcher watches: keep the row in memory
  struct stat st;
  size_t want = (size_t)(cw_rank + 1) * CW_FIELDS * sizeof(int64_t);
  if (fstat(fd, &st) == 0 && (size_t)st.st_size >= want) {
    void* map = mmap(nullptr, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) cw_row = (int64_t*)map + (size_t)cw_rank * CW_FIELDS;
  }
  close(fd);
  cw_row[CW_F_PID] = getpid();
  cw_row[CW_F_SCHEDULE] = 0;
  cw_row[CW_F_OP] = -1;
  cw_row[CW_F_MEMBER] = -1;
  cw_phase(CW_SETUP);
}

// The op this rank's GPU is in, from the progress words (-1: before the first): the least advanced
// of word 0 and the per-block words (every block marks every op it passes).
// A backend whose GPU writes its progress words in GPU memory sets this: it brings them into cw_marks
// (`wait`: now, within a bound; else at most every few ms, without blocking).
static void (*cw_refresh_marks)(bool wait) = nullptr;

static int cw_current_op() {
  if (!cw_marks) return -1;
  int op = (int)cw_marks[0] - 1;
  for (int b = 1; b < cw_mark_words; ++b) op = std::min(op, (int)cw_marks[b] - 1);
  return op;
}

static void cw_sync_progress() {
  if (cw_refresh_marks) cw_refresh_marks(false);
  int op = cw_current_op();
  if (cw_row[CW_F_OP] != op) cw_row[CW_F_OP] = op;
  cw_beat();
}

// Declared by the generated part: this rank's ops (text, file, line) and how many.
static const CwOpInfo* cw_op_info(int rank, int* count);

static void cw_op_json(std::string& line, int op) {
  int count = 0;
  const CwOpInfo* info = cw_op_info(cw_rank, &count);
  line += ",\"op\":";
  if (op < 0 || op >= count) { line += "null"; return; }
  line += "{\"index\":" + std::to_string(op) + ",\"member\":null,\"text\":";
  cw_json_str(line, info[op].text);
  line += ",\"file\":";
  cw_json_str(line, info[op].file);
  line += ",\"line\":" + std::to_string(info[op].line);
  if (cw_mark_words > 1 && cw_marks) {
    line += ",\"blocks\":[";
    for (int b = 1; b < cw_mark_words; ++b) {
      if (b > 1) line += ',';
      line += std::to_string((int)cw_marks[b] - 1);
    }
    line += ']';
  }
  line += '}';
}

static const char* cw_backend_name();
static const char* cw_schedule_name();

static void cw_emit(const std::string& line) {
  if (!cw_job.empty()) {
    std::string path = cw_job + "/rank" + std::to_string(cw_rank) + ".jsonl";
    FILE* f = fopen(path.c_str(), "a");
    if (f) { fputs(line.c_str(), f); fputc('\n', f); fclose(f); }
  }
  fputs(line.c_str(), stdout);
  fputc('\n', stdout);
  fflush(stdout);
}

static std::string cw_line_head(const char* status) {
  std::string line = "{\"rank\":" + std::to_string(cw_rank) + ",\"item\":0,\"schedule\":";
  cw_json_str(line, cw_schedule_name());
  line += ",\"world\":" + std::to_string(cw_world) + ",\"backend\":";
  cw_json_str(line, cw_backend_name());
  line += ",\"status\":";
  cw_json_str(line, status);
  return line;
}

// A rank that cannot go on: its line (status, message, the op its GPU is in), then exit without
// finalising (peers may be waiting on it; the launcher ends the job).
[[noreturn]] static void cw_abandon(const char* status, const std::string& message, int code) {
  std::string line = cw_line_head(status);
  line += ",\"seconds\":[],\"graph_seconds\":[],\"message\":";
  cw_json_str(line, message.c_str());
  if (!cw_status_detail.empty()) { line += ",\"waiting\":"; cw_json_str(line, cw_status_detail.c_str()); }
  if (cw_refresh_marks) cw_refresh_marks(true);
  cw_op_json(line, cw_current_op());
  int phase = (int)cw_row[CW_F_PHASE], count = 0;
  cw_op_info(cw_rank, &count);
  if (phase == CW_RUNNING && cw_current_op() >= count) phase = CW_SETTLING;  // past its last op
  line += ",\"phase\":";
  cw_json_str(line, CW_PHASE_NAMES[phase >= 0 && phase <= CW_FINISHED ? phase : 0]);
  line += '}';
  cw_emit(line);
  fflush(stderr);
  _exit(code);
}

static void cw_fail(const char* call, const char* why, const char* file, int line) {
  char b[512];
  snprintf(b, sizeof b, "%s failed: %s (%s:%d)", call, why ? why : "?", file, line);
  cw_abandon("error", b, 2);
}

#define CW_CUDA(x) do { cudaError_t e_ = (x); \
  if (e_ != cudaSuccess) cw_fail(#x, cudaGetErrorString(e_), __FILE__, __LINE__); } while (0)
#define CW_MPI(x) do { int r_ = (x); if (r_ != MPI_SUCCESS) { char s_[MPI_MAX_ERROR_STRING]; int n_ = 0; \
  MPI_Error_string(r_, s_, &n_); cw_fail(#x, s_, __FILE__, __LINE__); } } while (0)

static void cw_on_signal(int) { cw_stop_signal = 1; }

// ------------------------------------------------------------------------- numbers (numeric.py)
__host__ __device__ inline uint64_t cw_mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
__host__ __device__ inline double cw_level(uint64_t key) {  // LEVELS[mix(key) % 3], LEVELS = (1, 2, 4)
  uint64_t m = cw_mix(key) % 3;
  return m == 0 ? 1.0 : (m == 1 ? 2.0 : 4.0);
}

// Conversions from double (truncation for integers, as numeric.to_dtype) and to the arithmetic type.
template <typename T> __device__ inline T cw_from(double v) { return (T)(long long)v; }
template <> __device__ inline float cw_from<float>(double v) { return (float)v; }
template <> __device__ inline double cw_from<double>(double v) { return v; }
template <> __device__ inline __half cw_from<__half>(double v) { return __double2half(v); }
template <> __device__ inline __nv_bfloat16 cw_from<__nv_bfloat16>(double v) { return __double2bfloat16(v); }
template <> __device__ inline uint64_t cw_from<uint64_t>(double v) { return (uint64_t)(long long)v; }

// v(x) of numeric.opaque_output: an element's 64 bits as a double, an int64 or a uint64.
template <typename T> __device__ inline uint64_t cw_word(T v) { return (uint64_t)(int64_t)v; }
template <> __device__ inline uint64_t cw_word<uint32_t>(uint32_t v) { return (uint64_t)v; }
template <> __device__ inline uint64_t cw_word<uint64_t>(uint64_t v) { return v; }
template <> __device__ inline uint64_t cw_word<float>(float v) { return (uint64_t)__double_as_longlong((double)v); }
template <> __device__ inline uint64_t cw_word<double>(double v) { return (uint64_t)__double_as_longlong(v); }
template <> __device__ inline uint64_t cw_word<__half>(__half v) {
  return (uint64_t)__double_as_longlong((double)__half2float(v));
}
template <> __device__ inline uint64_t cw_word<__nv_bfloat16>(__nv_bfloat16 v) {
  return (uint64_t)__double_as_longlong((double)__bfloat162float(v));
}

// One reduction step, rounded to T (float16 and bfloat16 through float, integers wrapping).
template <typename T> struct CwArith { typedef T acc; static __device__ T wrap(acc v) { return v; } };
template <> struct CwArith<__half> {
  typedef float acc;
  static __device__ __half wrap(float v) { return __float2half_rn(v); }
};
template <> struct CwArith<__nv_bfloat16> {
  typedef float acc;
  static __device__ __nv_bfloat16 wrap(float v) { return __float2bfloat16_rn(v); }
};
template <typename T> __device__ inline typename CwArith<T>::acc cw_acc(T v) { return (typename CwArith<T>::acc)v; }
template <> __device__ inline float cw_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ inline float cw_acc<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename A> __device__ inline A cw_apply(int op, A a, A b) {
  if (op == CW_SUM) return a + b;
  if (op == CW_PROD) return a * b;
  if (a != a) return a;  // NaN propagates, as numpy's maximum and minimum
  if (b != b) return b;
  if (op == CW_MAX) return a > b ? a : b;
  return a < b ? a : b;
}
// Integers wrap (unsigned arithmetic: signed overflow is undefined in C++).
template <typename A, typename U> __device__ inline A cw_apply_int(int op, A a, A b) {
  if (op == CW_SUM) return (A)((U)a + (U)b);
  if (op == CW_PROD) return (A)((U)a * (U)b);
  if (op == CW_MAX) return a > b ? a : b;
  return a < b ? a : b;
}
template <> __device__ inline int32_t cw_apply<int32_t>(int op, int32_t a, int32_t b) {
  return cw_apply_int<int32_t, uint32_t>(op, a, b);
}
template <> __device__ inline int64_t cw_apply<int64_t>(int op, int64_t a, int64_t b) {
  return cw_apply_int<int64_t, uint64_t>(op, a, b);
}
template <> __device__ inline uint32_t cw_apply<uint32_t>(int op, uint32_t a, uint32_t b) {
  return cw_apply_int<uint32_t, uint32_t>(op, a, b);
}
template <> __device__ inline uint64_t cw_apply<uint64_t>(int op, uint64_t a, uint64_t b) {
  return cw_apply_int<uint64_t, uint64_t>(op, a, b);
}

// ------------------------------------------------------------------------------------ kernels
static int cw_grid(size_t n, int threads) {
  size_t blocks = (n + threads - 1) / threads;
  return (int)std::max<size_t>(1, std::min<size_t>(blocks, 1024));
}
#define CW_FOR(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
                          i += (size_t)gridDim.x * blockDim.x)

template <typename T> __global__ void cw_inputs_kernel(T* p, size_t n, uint64_t base) {
  CW_FOR(i, n) p[i] = cw_from<T>(cw_level(base + i));
}

template <typename T> __global__ void cw_fill_kernel(T* p, size_t n, T value) {
  CW_FOR(i, n) p[i] = value;
}

// dst = srcs[0] op srcs[1] op ... (left to right, rounded after each step); every source is read at
// element i before dst[i] is written, so a source may be dst itself (the same elements).
template <typename T> __global__ void cw_reduce_kernel(T* dst, const T* const* srcs, int k, size_t n, int op) {
  typedef typename CwArith<T>::acc A;
  CW_FOR(i, n) {
    T acc = srcs[0][i];
    for (int j = 1; j < k; ++j) acc = CwArith<T>::wrap(cw_apply<A>(op, cw_acc<T>(acc), cw_acc<T>(srcs[j][i])));
    dst[i] = acc;
  }
}

// h += sum of mix(v(x_p) ^ mix(seed + p)), p = pos + i (numeric.opaque_output).
template <typename T> __global__ void cw_hash_kernel(const T* p, size_t n, uint64_t seed, uint64_t pos,
                                                     unsigned long long* h) {
  unsigned long long mine = 0;
  CW_FOR(i, n) mine += cw_mix(cw_word<T>(p[i]) ^ cw_mix(seed + pos + i));
  for (int off = 16; off > 0; off >>= 1) mine += __shfl_down_sync(0xffffffffu, mine, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(h, mine);
}
__global__ void cw_set_u64_kernel(unsigned long long* p, uint64_t v) { *p = v; }
template <typename T> __global__ void cw_opaque_kernel(T* p, size_t n, const unsigned long long* h, uint64_t j0) {
  uint64_t hv = *h;
  CW_FOR(i, n) p[i] = cw_from<T>(cw_level(hv + j0 + i));
}

// Compare got with want over [start, stop) bit for bit (W: an unsigned type of the element's width).
struct CwMiss { unsigned long long count; unsigned long long first[8]; };
template <typename W> __global__ void cw_compare_kernel(const W* got, const W* want, size_t start, size_t stop,
                                                        CwMiss* miss) {
  CW_FOR(k, stop - start) {
    size_t i = start + k;
    if (got[i] != want[i]) {
      unsigned long long slot = atomicAdd(&miss->count, 1ULL);
      if (slot < 8) miss->first[slot] = i;
    }
  }
}

__global__ void cw_mark_kernel(uint32_t* word, uint32_t value) {
  *(volatile uint32_t*)word = value;
  __threadfence_system();
}

// Progress: the GPU writes "now in op `index`" when the stream reaches it (after the op before).
static void cw_find_stream_writes() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &found);
#else
  cudaError_t e = cudaGetDriverEntryPoint("cuStreamWriteValue32", &fn, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) fn = nullptr;
  cudaGetLastError();
  if (fn) {  // try it once: some systems disable stream memory operations
    cudaStream_t probe;
    CW_CUDA(cudaStreamCreateWithFlags(&probe, cudaStreamNonBlocking));
    if (((CwWriteValue32)fn)((CUstream)probe, (CUdeviceptr)cw_marks_dev, 0, CU_STREAM_WRITE_VALUE_DEFAULT) !=
        CUDA_SUCCESS) fn = nullptr;
    CW_CUDA(cudaStreamSynchronize(probe));
    CW_CUDA(cudaStreamDestroy(probe));
  }
  cw_write_value32 = (CwWriteValue32)fn;
}

static void cw_mark(cudaStream_t s, int index) {
  if (cw_write_value32) {
    CUresult r = cw_write_value32((CUstream)s, (CUdeviceptr)cw_marks_dev, (cuuint32_t)(index + 1),
                                  CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) cw_fail("cuStreamWriteValue32", "the driver refused a stream write", __FILE__, __LINE__);
  } else {
    cw_mark_kernel<<<1, 1, 0, s>>>(cw_marks_dev, (uint32_t)(index + 1));
  }
}

template <typename T> static void cw_inputs(cudaStream_t s, T* p, size_t n, uint64_t base) {
  cw_inputs_kernel<T><<<cw_grid(n, 256), 256, 0, s>>>(p, n, base);
}

static void cw_inputs_any(cudaStream_t s, const CwBuf& b) {
  switch (b.dtype) {
    case CW_F16: cw_inputs(s, (__half*)b.ptr, b.count, b.base); break;
    case CW_BF16: cw_inputs(s, (__nv_bfloat16*)b.ptr, b.count, b.base); break;
    case CW_F32: cw_inputs(s, (float*)b.ptr, b.count, b.base); break;
    case CW_F64: cw_inputs(s, (double*)b.ptr, b.count, b.base); break;
    case CW_I32: cw_inputs(s, (int32_t*)b.ptr, b.count, b.base); break;
    case CW_I64: cw_inputs(s, (int64_t*)b.ptr, b.count, b.base); break;
    case CW_U32: cw_inputs(s, (uint32_t*)b.ptr, b.count, b.base); break;
    default: cw_inputs(s, (uint64_t*)b.ptr, b.count, b.base); break;
  }
}

template <typename T> static void cw_reduce(cudaStream_t s, T* dst, const T* const* srcs_dev, int k, size_t n,
                                            int op) {
  cw_reduce_kernel<T><<<cw_grid(n, 256), 256, 0, s>>>(dst, srcs_dev, k, n, op);
}

template <typename T> static void cw_fill(cudaStream_t s, T* p, size_t n, T value) {
  cw_fill_kernel<T><<<cw_grid(n, 256), 256, 0, s>>>(p, n, value);
}

template <typename T> static void cw_hash(cudaStream_t s, const T* p, size_t n, uint64_t seed, uint64_t pos,
                                          unsigned long long* h) {
  cw_hash_kernel<T><<<cw_grid(n, 256), 256, 0, s>>>(p, n, seed, pos, h);
}

template <typename T> static void cw_opaque(cudaStream_t s, T* p, size_t n, const unsigned long long* h,
                                            uint64_t j0) {
  cw_opaque_kernel<T><<<cw_grid(n, 256), 256, 0, s>>>(p, n, h, j0);
}

// A device value of T with the exact bits `bits` (fill constants are rounded by the generator).
template <typename T> static T cw_bits(uint64_t bits) {
  T v;
  memcpy(&v, &bits, sizeof(T));
  return v;
}

// ------------------------------------------------------------------------------- expectations
struct CwRange { uint64_t start, stop; };
struct CwExpect {
  std::vector<CwRange> checked, post;
  void* want = nullptr;   // device: the reference execution's values (when checked is not empty)
  void* post_want = nullptr;
};
static std::vector<CwExpect> cw_expect;
static std::vector<uint64_t> cw_expect_signals;
static std::vector<uint8_t> cw_expect_signals_checked;
static bool cw_have_expect = false;

static void cw_read(FILE* f, void* p, size_t n, const char* what) {
  if (fread(p, 1, n, f) != n) {
    cw_abandon("error", std::string("the expectation file ends early (") + what +
               "): write it again with clockworks validate", 2);
  }
}

static void cw_read_ranges(FILE* f, std::vector<CwRange>& out) {
  uint64_t n = 0;
  cw_read(f, &n, 8, "ranges");
  out.resize(n);
  if (n) cw_read(f, out.data(), n * sizeof(CwRange), "ranges");
}

static void* cw_read_device(FILE* f, size_t bytes) {
  std::vector<char> host(std::min<size_t>(bytes, (size_t)64 << 20));
  void* dev = nullptr;
  CW_CUDA(cudaMalloc(&dev, std::max<size_t>(bytes, 1)));
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min(host.size(), bytes - done);
    cw_read(f, host.data(), n, "values");
    CW_CUDA(cudaMemcpy((char*)dev + done, host.data(), n, cudaMemcpyHostToDevice));
    done += n;
  }
  return dev;
}

static void cw_load_expect(CwBuf* bufs, int nbufs, int words) {
  if (cw_job.empty()) return;
  std::string path = cw_job + "/expect" + std::to_string(cw_rank) + ".bin";
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) return;  // no expected values: the rank runs and reports "ran"
  char magic[8];
  uint32_t head[4];
  cw_read(f, magic, 8, "header");
  cw_read(f, head, sizeof head, "header");
  if (memcmp(magic, "CWEXPECT", 8) != 0 || head[0] != 1 || (int)head[1] != cw_rank || (int)head[2] != nbufs ||
      (int)head[3] != words) {
    cw_abandon("error", "the expectation file " + path + " was not written for this program (another schedule, "
               "size or rank): write it again with clockworks validate", 2);
  }
  cw_expect.assign(nbufs, CwExpect());
  for (int b = 0; b < nbufs; ++b) {
    uint64_t count = 0;
    uint32_t size[2];
    cw_read(f, &count, 8, "count");
    cw_read(f, size, sizeof size, "itemsize");
    if (count != bufs[b].count || size[0] != CW_ITEMSIZE[bufs[b].dtype]) {
      cw_abandon("error", std::string("the expectation file's buffer ") + bufs[b].name + " has another size than "
                 "this program's: generate and validate at the same sizes", 2);
    }
    size_t bytes = count * size[0];
    cw_read_ranges(f, cw_expect[b].checked);
    if (!cw_expect[b].checked.empty()) cw_expect[b].want = cw_read_device(f, bytes);
    cw_read_ranges(f, cw_expect[b].post);
    if (!cw_expect[b].post.empty()) cw_expect[b].post_want = cw_read_device(f, bytes);
  }
  uint64_t n = 0;
  cw_read(f, &n, 8, "signal words");
  cw_expect_signals.resize(n);
  cw_expect_signals_checked.resize(n);
  if (n) {
    cw_read(f, cw_expect_signals.data(), n * 8, "signal words");
    cw_read(f, cw_expect_signals_checked.data(), n, "signal words");
  }
  fclose(f);
  cw_have_expect = true;
}

struct CwTally {
  unsigned long long checked = 0, mismatches = 0, post_checked = 0, post_failures = 0;
  std::string first;  // JSON objects, comma-separated
  int shown = 0;
  std::string dumps;  // the checks (iterations) whose memory was dumped, comma-separated
};

static void cw_note(CwTally& t, const char* buffer, long long element, const char* against, int iteration) {
  if (t.shown >= 8) return;
  if (t.shown++) t.first += ',';
  t.first += "{\"rank\":" + std::to_string(cw_rank) + ",\"buffer\":";
  if (buffer) cw_json_str(t.first, buffer); else t.first += "null";
  t.first += ",\"element\":" + std::to_string(element) + ",\"against\":\"" + against +
             "\",\"iteration\":" + std::to_string(iteration) + '}';
}

// Set for the run whose outputs are read as the caller reads them, when the rank's program ends: an
// output is then compared (and dumped) from its copy taken at that moment (`CwBuf.ended`).
static int cw_reading_at_end = 0;
static const void* cw_as_read(const CwBuf& b) { return cw_reading_at_end && b.ended ? b.ended : b.ptr; }

static unsigned long long cw_compare_ranges(cudaStream_t s, const CwBuf& b, const void* want,
                                            const std::vector<CwRange>& ranges, CwMiss* miss_dev, CwMiss* miss,
                                            unsigned long long* counted) {
  CW_CUDA(cudaMemsetAsync(miss_dev, 0, sizeof(CwMiss), s));
  size_t w = CW_ITEMSIZE[b.dtype];
  const void* got = cw_as_read(b);
  for (const CwRange& r : ranges) {
    *counted += r.stop - r.start;
    if (r.stop <= r.start) continue;
    int grid = cw_grid(r.stop - r.start, 256);
    if (w == 2) cw_compare_kernel<<<grid, 256, 0, s>>>((const uint16_t*)got, (const uint16_t*)want, r.start, r.stop, miss_dev);
    else if (w == 4) cw_compare_kernel<<<grid, 256, 0, s>>>((const uint32_t*)got, (const uint32_t*)want, r.start, r.stop, miss_dev);
    else cw_compare_kernel<<<grid, 256, 0, s>>>((const uint64_t*)got, (const uint64_t*)want, r.start, r.stop, miss_dev);
  }
  CW_CUDA(cudaMemcpyAsync(miss, miss_dev, sizeof(CwMiss), cudaMemcpyDeviceToHost, s));
  CW_CUDA(cudaStreamSynchronize(s));
  std::sort(miss->first, miss->first + std::min<unsigned long long>(miss->count, 8));
  return miss->count;
}

static void cw_dump(CwBuf* bufs, int nbufs, const uint64_t* signals, int words, int iteration) {
  if (cw_job.empty()) return;
  std::string path = cw_job + "/dump" + std::to_string(cw_rank) + "_" + std::to_string(iteration) + ".bin";
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) return;
  std::vector<char> host((size_t)64 << 20);
  for (int b = 0; b < nbufs; ++b) {
    size_t bytes = bufs[b].count * CW_ITEMSIZE[bufs[b].dtype];
    for (size_t done = 0; done < bytes;) {
      size_t n = std::min(host.size(), bytes - done);
      CW_CUDA(cudaMemcpy(host.data(), (const char*)cw_as_read(bufs[b]) + done, n, cudaMemcpyDeviceToHost));
      fwrite(host.data(), 1, n, f);
      done += n;
    }
  }
  if (words) fwrite(signals, 8, words, f);
  fclose(f);
}

// Compare every checked element and signal word of this rank with the expected values.
static void cw_compare(cudaStream_t s, CwBuf* bufs, int nbufs, const uint64_t* signals_dev, int words,
                       int iteration, CwTally& t) {
  if (!cw_have_expect) return;
  cw_phase(CW_COMPARING);
  CwMiss* miss_dev = nullptr;
  CwMiss miss;
  CW_CUDA(cudaMalloc(&miss_dev, sizeof(CwMiss)));
  bool differs = false;
  for (int b = 0; b < nbufs; ++b) {
    const CwExpect& e = cw_expect[b];
    if (!e.checked.empty()) {
      unsigned long long bad = cw_compare_ranges(s, bufs[b], e.want, e.checked, miss_dev, &miss, &t.checked);
      t.mismatches += bad;
      for (unsigned long long k = 0; k < std::min<unsigned long long>(bad, 8); ++k)
        cw_note(t, bufs[b].name, (long long)miss.first[k], "checker", iteration);
      differs |= bad > 0;
    }
    if (!e.post.empty()) {
      unsigned long long bad = cw_compare_ranges(s, bufs[b], e.post_want, e.post, miss_dev, &miss, &t.post_checked);
      t.post_failures += bad;
      for (unsigned long long k = 0; k < std::min<unsigned long long>(bad, 8); ++k)
        cw_note(t, bufs[b].name, (long long)miss.first[k], "postcondition", iteration);
      differs |= bad > 0;
    }
  }
  CW_CUDA(cudaFree(miss_dev));
  std::vector<uint64_t> got(words);
  if (words) CW_CUDA(cudaMemcpy(got.data(), signals_dev, words * 8, cudaMemcpyDeviceToHost));
  for (int w = 0; w < words && w < (int)cw_expect_signals.size(); ++w) {
    if (!cw_expect_signals_checked[w]) continue;
    ++t.checked;
    if (got[w] != cw_expect_signals[w]) {
      ++t.mismatches;
      cw_note(t, nullptr, w, "checker", iteration);
      differs = true;
    }
  }
  if (differs && !cw_job.empty()) {  // the harness compares each dump with every execution of the checker
    cw_dump(bufs, nbufs, got.data(), words, iteration);
    t.dumps += (t.dumps.empty() ? "" : ",") + std::to_string(iteration);
  }
}

// Wait for `done` without blocking: the progress words are copied to the progress file, a signal
// from mpiexec or the deadline ends the rank with its line.
static void cw_wait(cudaEvent_t done, double deadline) {
  for (;;) {
    cudaError_t e = cudaEventQuery(done);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) CW_CUDA(e);
    cw_sync_progress();
    if (cw_stop_signal) cw_abandon("stopped", "another rank of the job died", 3);
    if (cw_now() > deadline) {
      char b[160];
      snprintf(b, sizeof b, "the run did not finish within %.1f s (--timeout)", cw_timeout);
      cw_abandon("timeout", b, 3);
    }
    usleep(50);
  }
}

static void cw_usage_error(const char* what) {
  if (cw_rank == 0) {
    fprintf(stderr, "%s\nusage: mpirun -np %d ./PROGRAM [--job DIR] [--iters K] [--warmup W] [--timeout S] "
            "[--no-graph] [--host-progress]\n", what, cw_world);
  }
  MPI_Finalize();
  exit(2);
}

static void cw_args(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool more = i + 1 < argc;
    if (a == "--job" && more) cw_job = argv[++i];
    else if (a == "--iters" && more) cw_iters = atoi(argv[++i]);
    else if (a == "--warmup" && more) cw_warmup = atoi(argv[++i]);
    else if (a == "--timeout" && more) cw_timeout = atof(argv[++i]);
    else if (a == "--no-graph") cw_graph = 0;
    else if (a == "--host-progress") cw_host_progress = 1;
    else cw_usage_error(("unknown or incomplete argument: " + a).c_str());
  }
  if (cw_iters < 1 || cw_warmup < 0 || !(cw_timeout > 0)) cw_usage_error("--iters must be >= 1, --warmup >= 0, "
                                                                           "--timeout > 0");
}

static std::string cw_times_json(const std::vector<double>& t) {
  std::string out = "[";
  for (size_t i = 0; i < t.size(); ++i) {
    if (i) out += ',';
    cw_json_num(out, t[i]);
  }
  return out + ']';
}
// ---------------------------------------------------------------------------- end of support
