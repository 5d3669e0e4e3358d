// ---------------------------------------------------------------------------------------------
// The NVSHMEM backend's device pieces (clockworks_dist/codegen/nvshmem.cuh), inlined in every program
// the backend generates after support.cuh: each rank's ops run in one cooperative kernel (rank<k>()
// below them) that calls these. Why each sync is where it is: clockworks_dist/codegen/nvshmem.py.
// ---------------------------------------------------------------------------------------------
namespace cg = cooperative_groups;
#define CW_NV(x) do { int r_ = (int)(x); if (r_ != 0) { char b_[48]; snprintf(b_, sizeof b_, "NVSHMEM status %d", r_); \
  cw_fail(#x, b_, __FILE__, __LINE__); } } while (0)
static const int CW_NV_THREADS = 512;          // threads per block
static int cw_nv_grid = 1;                     // blocks of this rank's kernel (setup: wanted, capped by SMs, residency)
static unsigned* cw_nv_arrive = nullptr;       // arrival counters of the "last block runs it" handoffs, left at 0
static unsigned long long* cw_nv_hash = nullptr;  // compute ops: each block's partial hash of what it read
static char* cw_nv_pool = nullptr;             // per-rank buffers: one symmetric allocation, carved in order
static size_t cw_nv_pool_bytes = 0, cw_nv_pool_used = 0;

static void* cw_nv_malloc(size_t bytes) {      // symmetric: every PE calls it in the same order, same size
  void* p = nvshmem_malloc(std::max<size_t>(bytes, 16));
  if (!p) cw_abandon("error", "nvshmem_malloc failed: the symmetric heap is too small (set NVSHMEM_SYMMETRIC_SIZE)", 2);
  return p;
}
static void* cw_nv_local(size_t bytes) {       // a per-rank buffer from the pool (valid as a put's or get's local side)
  size_t at = cw_nv_pool_used;
  cw_nv_pool_used += (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  if (cw_nv_pool_used > cw_nv_pool_bytes) cw_abandon("error", "the pool of per-rank buffers is too small", 2);
  return cw_nv_pool + at;
}

// This block's share [begin, end) of n units of an op spread over `want` blocks from block `base`
// (want 1: block `base` does it all); shares are multiples of `quantum` (16 bytes: vector copies).
struct CwNvShare { size_t begin, end; };
__device__ inline CwNvShare cw_nv_share(size_t n, unsigned want, unsigned base, size_t quantum) {
  unsigned g = gridDim.x, nb = want < g ? want : g;
  unsigned t = (blockIdx.x + g - base % g) % g;
  CwNvShare s = {0, 0};
  if (t >= nb) return s;
  size_t per = ((n + nb - 1) / nb + quantum - 1) / quantum * quantum;
  s.begin = per * t < n ? per * t : n;
  s.end = s.begin + per < n ? s.begin + per : n;
  return s;
}
__device__ inline bool cw_nv_mine(unsigned base) { return blockIdx.x == base % gridDim.x; }

// Progress: block b's thread 0 writes "now in op i" to its word (block 0 to word 0 too), write-through
// (st.global.wt). The words live in GPU memory: the fences the ops need (nvshmem_fence, quiet,
// __threadfence_system) then do not wait for writes to cross PCIe to the host, which they would
// with host-mapped words (--host-progress keeps those, to compare). The host copies the words out
// while it waits, on a stream of its own (the copy engine runs beside the kernel), and once more
// when it reports a hang.
__device__ inline void cw_nv_mark(uint32_t* marks, int op) {
  if (threadIdx.x == 0) {
    __stwt(marks + 1 + blockIdx.x, (unsigned int)(op + 1));
    if (blockIdx.x == 0) __stwt(marks, (unsigned int)(op + 1));
  }
}

static uint32_t* cw_nv_marks_gpu = nullptr;   // the progress words in GPU memory (null: --host-progress)
static cudaStream_t cw_nv_copier = nullptr;    // copies them to the host words, beside the kernel
static cudaEvent_t cw_nv_copied = nullptr;
static bool cw_nv_copying = false;
static double cw_nv_copy_at = -1.0;

// Bring the GPU's progress words into cw_marks: at most every 5 ms and never blocking while the host
// waits; with `wait`, a copy now, waited for up to 1 s (a broken context only leaves the words older).
static void cw_nv_refresh_marks(bool wait) {
  if (!cw_nv_marks_gpu) return;
  if (cw_nv_copying) {
    if (cudaEventQuery(cw_nv_copied) == cudaErrorNotReady && !wait) return;
    cw_nv_copying = false;
  }
  if (!wait && cw_now() - cw_nv_copy_at < 0.005) return;
  cw_nv_copy_at = cw_now();
  if (cudaMemcpyAsync((void*)cw_marks, cw_nv_marks_gpu, cw_mark_words * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                      cw_nv_copier) != cudaSuccess || cudaEventRecord(cw_nv_copied, cw_nv_copier) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  cw_nv_copying = true;
  if (!wait) return;
  while (cudaEventQuery(cw_nv_copied) == cudaErrorNotReady && cw_now() - cw_nv_copy_at < 1.0) usleep(100);
  cudaGetLastError();
  cw_nv_copying = false;
}

// The run that reads each output as the caller does, when the rank's program ends (`cw_reading_at_end`
// on the host, one untimed run): the last kernel copies the outputs to `cw_nv_ended` at the rank's end,
// before the closing quiet and barrier let every delivery land. Off in every other run.
static __device__ int cw_nv_read_at_end = 0;
static __device__ char* cw_nv_ended = nullptr;

// Copy `bytes` from `src` to `cw_nv_ended + offset`, spread over the grid.
__device__ inline void cw_nv_copy_out(size_t offset, const void* src, size_t bytes) {
  const char* from = (const char*)src;
  char* to = cw_nv_ended + offset;
  size_t step = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += step) to[i] = from[i];
}

// The block's threads are done with what came before; with `fence`, thread 0's nvshmem_fence then
// orders the block's deliveries (per PE) and makes its stores visible to every PE (cumulative: it
// covers what the other threads did before the __syncthreads).
__device__ inline void cw_nv_block(bool fence) {
  __syncthreads();
  if (fence && threadIdx.x == 0) nvshmem_fence();
  __syncthreads();
}

// Every thread of the grid waits for every other. A grid of one block may have been launched
// without the cooperative attribute (the host launch below), where a grid-wide sync is not allowed; there
// every thread of the grid is in this block, and the block's barrier orders all that the grid-wide
// sync would.
__device__ inline void cw_nv_grid_barrier(cg::grid_group& grid) {
  if (gridDim.x == 1) {
    __syncthreads();
  } else {
    grid.sync();
  }
}

// Every block, after its own work (and its fence), waits for every other block.
__device__ inline void cw_nv_grid_sync(cg::grid_group& grid, bool fence) {
  if (fence) {
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_fence();
  }
  cw_nv_grid_barrier(grid);
}

// Every block arrives after its own work (with `fence`: after its nvshmem_fence); true in the last
// block to arrive, which is then after every block's work and runs the op alone. The others go on
// without waiting. The last one leaves the counter at 0 for the next run.
__device__ inline bool cw_nv_last(unsigned* counter, bool fence) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (fence) nvshmem_fence(); else __threadfence();
    unsigned before = atomicAdd(counter, 1u);
    last = before == gridDim.x - 1;
    if (last) {
      atomicExch(counter, 0u);
      __threadfence();
    }
  }
  __syncthreads();
  return last != 0;
}

// A library's kernel for every call (calls without end, codegen/library): this PE's number of the call,
// counted on the device in stream order, so a CUDA graph replayed any number of times counts on too.
// Every block reads the count, then arrives; the last block to arrive has seen every other block's read
// (each fenced its read before its arrival) and moves the count on for the next call's kernel, which
// starts after this one has ended (stream order). It leaves the arrival counter at 0.
__device__ inline unsigned long long cw_nv_call_number(unsigned long long* count, unsigned* arrive) {
  __shared__ unsigned long long number;
  if (threadIdx.x == 0) {
    number = *(volatile unsigned long long*)count;
    __threadfence();  // the read is done before this block counts itself in
    if (atomicAdd(arrive, 1u) == gridDim.x - 1) {
      *arrive = 0u;
      *count = number + 1ULL;
    }
  }
  __syncthreads();
  return number;
}

// Every block completes its own deliveries (quiet), then every block waits for every other.
__device__ inline void cw_nv_quiet_all(cg::grid_group& grid) {
  __syncthreads();
  if (threadIdx.x == 0) nvshmem_quiet();
  cw_nv_grid_barrier(grid);
}

// Thread 0 of every block polls the word, so each block's later work follows the write that satisfied it.
__device__ inline void cw_nv_wait(uint64_t* word, int cmp, uint64_t value) {
  if (threadIdx.x == 0) nvshmem_uint64_wait_until(word, cmp, value);
  __syncthreads();
}

__device__ inline void cw_nv_put(void* dst, const void* src, size_t bytes, int pe, bool nbi, unsigned want,
                                 unsigned base) {
  CwNvShare s = cw_nv_share(bytes, want, base, 16);
  if (s.begin >= s.end) return;
  if (nbi) nvshmemx_putmem_nbi_block((char*)dst + s.begin, (const char*)src + s.begin, s.end - s.begin, pe);
  else nvshmemx_putmem_block((char*)dst + s.begin, (const char*)src + s.begin, s.end - s.begin, pe);
}

__device__ inline void cw_nv_get(void* dst, const void* src, size_t bytes, int pe, bool nbi, unsigned want,
                                 unsigned base) {
  CwNvShare s = cw_nv_share(bytes, want, base, 16);
  if (s.begin >= s.end) return;
  if (nbi) nvshmemx_getmem_nbi_block((char*)dst + s.begin, (const char*)src + s.begin, s.end - s.begin, pe);
  else nvshmemx_getmem_block((char*)dst + s.begin, (const char*)src + s.begin, s.end - s.begin, pe);
}

__device__ inline void cw_nv_copy(void* dst, const void* src, size_t bytes, unsigned want, unsigned base) {
  CwNvShare s = cw_nv_share(bytes, want, base, 16);
  char* d = (char*)dst + s.begin;
  const char* p = (const char*)src + s.begin;
  size_t n = s.end - s.begin;
  if ((((uintptr_t)d | (uintptr_t)p) & 15) == 0) {
    size_t v = n / 16;
    for (size_t i = threadIdx.x; i < v; i += blockDim.x) ((int4*)d)[i] = ((const int4*)p)[i];
    d += v * 16;
    p += v * 16;
    n -= v * 16;
  }
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = p[i];
}

// dst = srcs[0] op srcs[1] op ... (support.cuh's arithmetic, left to right, rounded after each step);
// element i of every source is read before dst[i] is written, by the same thread (in place is fine).
// With `remote` (P peers' copies of the destination, reached by stores: nvshmem_ptr; null where a
// peer is not), each sum is also stored there by the thread that made it: puts of dst fused into the
// reduce (cw_nv_reduce_put).
template <typename T, int P> __device__ inline void cw_nv_reduce_share(T* dst, const T* const* srcs, int k, CwNvShare s,
                                                                       int op, T* const* remote) {
  typedef typename CwArith<T>::acc A;
  const int V = 16 / sizeof(T);
  size_t i0 = s.begin;
  bool vec = ((uintptr_t)(dst + i0) & 15) == 0;
  for (int q = 0; q < P; ++q) vec = vec && ((uintptr_t)(remote[q] + i0) & 15) == 0;
  for (int j = 0; j < k; ++j) vec = vec && ((uintptr_t)(srcs[j] + i0) & 15) == 0;
  if (vec) {
    size_t nv = (s.end - s.begin) / V;
    for (size_t v = threadIdx.x; v < nv; v += blockDim.x) {
      uint4 accv = *(const uint4*)(srcs[0] + i0 + v * V);
      T* acc = reinterpret_cast<T*>(&accv);
      for (int j = 1; j < k; ++j) {
        uint4 xv = *(const uint4*)(srcs[j] + i0 + v * V);
        const T* x = reinterpret_cast<const T*>(&xv);
        for (int l = 0; l < V; ++l) acc[l] = CwArith<T>::wrap(cw_apply<A>(op, cw_acc<T>(acc[l]), cw_acc<T>(x[l])));
      }
      *(uint4*)(dst + i0 + v * V) = accv;
#pragma unroll
      for (int q = 0; q < P; ++q)
        if (remote[q]) *(uint4*)(remote[q] + i0 + v * V) = accv;
    }
    i0 += nv * V;
  }
  for (size_t i = i0 + threadIdx.x; i < s.end; i += blockDim.x) {
    T acc = srcs[0][i];
    for (int j = 1; j < k; ++j) acc = CwArith<T>::wrap(cw_apply<A>(op, cw_acc<T>(acc), cw_acc<T>(srcs[j][i])));
    dst[i] = acc;
#pragma unroll
    for (int q = 0; q < P; ++q)
      if (remote[q]) remote[q][i] = acc;
  }
}
template <typename T> __device__ inline void cw_nv_reduce(T* dst, const T* const* srcs, int k, size_t n, int op,
                                                          unsigned want, unsigned base) {
  cw_nv_reduce_share<T, 0>(dst, srcs, k, cw_nv_share(n, want, base, 16 / sizeof(T)), op, nullptr);
}
// The reduce and the puts of its destination right after it, one per peer (nvshmem_plan.fusable_put), as
// one pass: this block's share of the sums goes into dst and, by the same threads' stores, into each
// PE pes[q]'s `peer_dst[q]` (its symmetric address; reached over NVLink by nvshmem_ptr). A peer that
// cannot be reached by stores gets, once the block's share is summed, that share put
// (nvshmemx_putmem[_nbi]_block): the same bytes, the same blocks. Either way the block's stores to the
// peers are in flight when it returns, as a put's are; a put_signal's signal follows (its blocks fence
// first: cw_nv_last, or the one block's fence).
template <typename T, int P> __device__ inline void cw_nv_reduce_put(T* dst, const T* const* srcs, int k, size_t n,
                                                                     int op, T* const* peer_dst, const int* pes,
                                                                     bool nbi, unsigned want, unsigned base) {
  CwNvShare s = cw_nv_share(n, want, base, 16 / sizeof(T));
  if (s.begin >= s.end) return;
  T* remote[P];
  bool all = true;
#pragma unroll
  for (int q = 0; q < P; ++q) {
    remote[q] = (T*)nvshmem_ptr(peer_dst[q], pes[q]);
    all = all && remote[q] != nullptr;
  }
  cw_nv_reduce_share<T, P>(dst, srcs, k, s, op, remote);
  if (all) return;
  __syncthreads();  // the share's sums are written before the block puts them
  for (int q = 0; q < P; ++q) {
    if (remote[q]) continue;
    if (nbi) nvshmemx_putmem_nbi_block(peer_dst[q] + s.begin, dst + s.begin, (s.end - s.begin) * sizeof(T), pes[q]);
    else nvshmemx_putmem_block(peer_dst[q] + s.begin, dst + s.begin, (s.end - s.begin) * sizeof(T), pes[q]);
  }
}

template <typename T> __device__ inline T cw_nv_bits(uint64_t bits) {  // the exact stored bits of a fill value
  T v;
  memcpy(&v, &bits, sizeof(T));
  return v;
}
template <typename T> __device__ inline void cw_nv_fill(T* p, size_t n, T value, unsigned want, unsigned base) {
  CwNvShare s = cw_nv_share(n, want, base, 1);
  for (size_t i = s.begin + threadIdx.x; i < s.end; i += blockDim.x) p[i] = value;
}

// compute (numeric.opaque_output): h = seed + sum of mix(v(x_p) ^ mix(seed + p)) over every element
// read, p its position; then output j = level(h + j). Sums wrap modulo 2**64, so any split adds up alike.
template <typename T> __device__ inline unsigned long long cw_nv_hash_part(const T* p, size_t n, uint64_t seed,
                                                                       uint64_t pos, unsigned want, unsigned base) {
  CwNvShare s = cw_nv_share(n, want, base, 1);
  unsigned long long mine = 0;
  for (size_t i = s.begin + threadIdx.x; i < s.end; i += blockDim.x)
    mine += cw_mix(cw_word<T>(p[i]) ^ cw_mix(seed + pos + i));
  return mine;
}
__device__ inline unsigned long long cw_nv_block_sum(unsigned long long mine) {  // the block's total, in every thread
  __shared__ unsigned long long part[32];
  __shared__ unsigned long long total;
  for (int off = 16; off > 0; off >>= 1) mine += __shfl_down_sync(0xffffffffu, mine, off);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long t = 0;
    for (unsigned w = 0; w < (blockDim.x + 31) / 32; ++w) t += part[w];
    total = t;
  }
  __syncthreads();
  unsigned long long t = total;
  __syncthreads();
  return t;
}
__device__ inline unsigned long long cw_nv_grid_sum(cg::grid_group& grid, unsigned long long* slots,
                                                    unsigned long long mine) {  // every block's total, in every thread
  unsigned long long block = cw_nv_block_sum(mine);
  if (threadIdx.x == 0) slots[blockIdx.x] = block;
  cw_nv_grid_barrier(grid);  // every block has hashed its share of every read before any output is written
  __shared__ unsigned long long total;
  if (threadIdx.x == 0) {
    unsigned long long t = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) t += ((volatile unsigned long long*)slots)[b];
    total = t;
  }
  __syncthreads();
  unsigned long long t = total;
  __syncthreads();
  return t;
}
template <typename T> __device__ inline void cw_nv_opaque(T* p, size_t n, uint64_t h, uint64_t j0, unsigned want,
                                                          unsigned base) {
  CwNvShare s = cw_nv_share(n, want, base, 1);
  for (size_t i = s.begin + threadIdx.x; i < s.end; i += blockDim.x) p[i] = cw_from<T>(cw_level(h + j0 + i));
}

// Flag-in-data packets (clockworks_dist/codegen/packets.py; NCCL's LL format): 16 bytes hold 8 bytes of
// payload and the flag twice, {data0, flag, data1, flag}. A 16-byte store lands at least in whole 8-byte
// halves, each with its flag, so a reader that sees the flag in both halves has the packet's payload;
// volatile accesses, so neither side keeps a packet in a register or the L1 cache.
__device__ inline void cw_nv_pk_store(uint4* p, uint32_t d0, uint32_t d1, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0), "r"(flag), "r"(d1), "r"(flag)
               : "memory");
}
__device__ inline uint4 cw_nv_pk_load(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p) : "memory");
  return v;
}
// put_signal as packets: this block's share of `bytes` of payload from src, each 8 bytes as one packet
// stored straight into the peer's packet area (`remote`: nvshmem_ptr of it, over NVLink). No fence and no
// separate signal: every packet carries the flag.
__device__ inline void cw_nv_pk_send(void* remote, const void* src, size_t bytes, uint32_t flag, unsigned want,
                                     unsigned base) {
  CwNvShare s = cw_nv_share(bytes / 8, want, base, 1);
  uint4* dst = (uint4*)remote;
  const uint2* in = (const uint2*)src;
  const int U = 4;  // each thread loads 4 units before it stores any: 4 loads in flight, not one at a time
  const size_t step = blockDim.x;
  for (size_t i0 = s.begin + threadIdx.x; i0 < s.end; i0 += U * step) {
    uint2 v[U];
#pragma unroll
    for (int q = 0; q < U; ++q)
      if (i0 + q * step < s.end) v[q] = in[i0 + q * step];
#pragma unroll
    for (int q = 0; q < U; ++q)
      if (i0 + q * step < s.end) cw_nv_pk_store(dst + i0 + q * step, v[q].x, v[q].y, flag);
  }
}
// wait_until(word eq flag) as packets: the block's threads poll every packet of the area until each shows
// the flag, then __syncthreads: the block's later work follows the last packet (as it follows the signal).
__device__ inline void cw_nv_pk_wait(const void* area, size_t bytes, uint32_t flag) {
  const uint4* p = (const uint4*)area;
  for (size_t i = threadIdx.x; i < bytes / 8; i += blockDim.x) {
    uint4 v = cw_nv_pk_load(p + i);
    while (v.y != flag || v.w != flag) v = cw_nv_pk_load(p + i);
  }
  __syncthreads();
}
// The copy after the wait: this block's share of the payload, out of the packets, into dst.
__device__ inline void cw_nv_pk_unpack(void* dst, const void* area, size_t bytes, unsigned want, unsigned base) {
  CwNvShare s = cw_nv_share(bytes / 8, want, base, 1);
  const uint4* p = (const uint4*)area;
  uint2* out = (uint2*)dst;
  for (size_t i = s.begin + threadIdx.x; i < s.end; i += blockDim.x) {
    uint4 v = cw_nv_pk_load(p + i);
    out[i] = make_uint2(v.x, v.z);
  }
}

// A reduce whose K sources include packet areas (lowering/packets.py: the unpacking copy dropped, the
// reduce reads the payload in its place; bit j of `packets` marks source j as an area, polled for
// flags[j]). This block's share, a packet (8 bytes) per unit: each thread takes U units at a time and
// issues every load of them before it waits for any (the plain sources' and each area's first look at
// its packets: K * U loads in flight, not one round trip after another), then polls each packet that
// did not show its flag in both halves yet, the load that shows it giving the payload. Nothing writes
// the plain sources between the wait and the reduce (packets.py), so reading them with the packets is
// reading them after the wait. The sources are combined left to right as cw_nv_reduce combines them,
// so the bits are the same.
template <typename T, int K> __device__ inline void cw_nv_pk_reduce(T* dst, const void* const* srcs, unsigned packets,
                                                                    const uint32_t* flags, size_t n, int op,
                                                                    unsigned want, unsigned base) {
  typedef typename CwArith<T>::acc A;
  const int V = 8 / sizeof(T);
  const int U = K <= 2 ? 4 : K <= 4 ? 2 : 1;  // K * U <= 8 units of two words in registers
  CwNvShare s = cw_nv_share(n / V, want, base, 1);
  const size_t step = blockDim.x;
  for (size_t u0 = s.begin + threadIdx.x; u0 < s.end; u0 += U * step) {
    uint2 in[K][U];
    uint4 pk[K][U];
#pragma unroll
    for (int j = 0; j < K; ++j)
#pragma unroll
      for (int q = 0; q < U; ++q) {
        size_t u = u0 + q * step;
        if (u >= s.end) continue;
        if ((packets >> j) & 1u) pk[j][q] = cw_nv_pk_load((const uint4*)srcs[j] + u);
        else in[j][q] = ((const uint2*)srcs[j])[u];
      }
#pragma unroll
    for (int j = 0; j < K; ++j) {
      if (!((packets >> j) & 1u)) continue;
#pragma unroll
      for (int q = 0; q < U; ++q) {
        size_t u = u0 + q * step;
        if (u >= s.end) continue;
        uint4 v = pk[j][q];
        while (v.y != flags[j] || v.w != flags[j]) v = cw_nv_pk_load((const uint4*)srcs[j] + u);
        in[j][q] = make_uint2(v.x, v.z);
      }
    }
#pragma unroll
    for (int q = 0; q < U; ++q) {
      size_t u = u0 + q * step;
      if (u >= s.end) continue;
      T* acc = reinterpret_cast<T*>(&in[0][q]);
#pragma unroll
      for (int j = 1; j < K; ++j) {
        const T* x = reinterpret_cast<const T*>(&in[j][q]);
        for (int l = 0; l < V; ++l) acc[l] = CwArith<T>::wrap(cw_apply<A>(op, cw_acc<T>(acc[l]), cw_acc<T>(x[l])));
      }
      ((uint2*)dst)[u] = in[0][q];
    }
  }
}

// The first statement of every generated kernel: wait for the kernel before it in the stream
// (programmatic dependent launch, PDL; the PTX `griddepcontrol.wait`, as scripts/gpu/pdl_probe.cu
// measured it). It returns only once every block of the preceding kernel has completed and that
// kernel's memory operations are visible, so every access of this kernel is ordered after every access
// of the previous one exactly as under plain stream order; launched with the PDL attribute
// (a plain launch: the host launch below), only this kernel's launch and what precedes this statement (reading its
// parameters) overlap the previous kernel. Launched without the attribute (every cooperative launch,
// PDL not asked for), or after stream work that is not a kernel, the kernel starts after that work as
// usual and the wait returns at once.
// Right after the wait, the kernel signals its dependents (`griddepcontrol.launch_dependents`, as the
// probe did): the next kernel, if launched with the attribute, may then be scheduled while this one
// works, so its launch is off the critical path. This does not weaken the order: the next kernel's
// own wait is for this kernel's completion and memory, not for the signal (the signal says nothing
// of completion or visibility). Its one block then sits resident at that wait; a plain launch is
// always one block (multi-block grids are cooperative and never carry the attribute), so it takes
// one block's slot beside this kernel and never starves it of SMs.
// PDL needs compute capability 9.0: built for an older architecture both statements are empty,
// and the host launch then never sets the attribute (it asks the kernel what it was compiled for).
__device__ __forceinline__ void cw_nv_after_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// One run of a rank's ops, a kernel at a time. Cooperative (every block resident, for the grid-wide syncs and for
// the NVSHMEM collectives inside it) through NVSHMEM's collective launch, which launches on
// NVSHMEM's own stream, joined to `s` by events; while `s` is captured into a CUDA graph: the same
// kernel and grid directly on `s`, as a kernel node with the cooperative attribute (the grid was
// checked resident with nvshmemx_collective_launch_query_gridsize).
// A kernel none of whose blocks waits for another (`cooperative` false, lowering.nvshmem_plan.syncs_grid:
// no grid-wide sync and no NVSHMEM collective in it; a call's kernel before the last of --calls, say)
// needs neither, whatever its grid: it is launched plainly on `s` (on one H200, 0.80 us between two
// small kernels in a graph, 1.11 us with the cooperative attribute; a grid-wide sync, which a
// one-block grid here replaces by its block's barrier, adds 0.93 us more: results/h200/one_gpu).
// Stream order is the same either way: it starts after every block of the kernel before has
// finished, and the next one after it has.
// A plain launch also carries programmatic stream serialization (PDL): the kernel may be launched
// while the one before it still runs, and its first statement (`cw_nv_after_previous_kernel`) waits
// for that one's completion and memory, so the order of their accesses is stream order's. On one
// H200 (scripts/gpu/pdl_probe.cu, results/h200/one_gpu) it took the gap between two small kernels in
// a graph from 0.80 us to 0.48-0.56 us, the kernel before signalling its dependents right after its
// own wait, as the generated kernels do (cw_nv_after_previous_kernel); what it saves on the generated
// kernels, measured side by side on one PE (one_pe_calls_h200.sh, percall against pdl;
// results/h200/one_gpu/one_pe_pdl): nothing in a graph (4.04 against 4.05 us per call at 1 KiB,
// 7.28 against 7.42 at 64 KiB: the time between two call kernels there is the kernel's completion,
// which the wait still waits for, not its launch), and about 0.8 us more per call eagerly at 1 KiB
// (5.6 against 4.8 us, the order of the two runs swapped: the launch with the attribute costs the
// host more). So it is off unless CW_NV_PDL=1 asks for it, for the side-by-side runs on two GPUs,
// where the hand-written probe saved 0.5 us per call at 8 KiB. Only a plain grid of one block carries
// it (the next kernel's block, waiting at its first statement, then takes one block's slot and never
// starves a kernel of SMs); a wider plain grid is launched without it. A cooperative launch never carries it:
// eagerly it goes through NVSHMEM's collective launch, which takes no launch attributes, so a captured
// cooperative kernel keeps exactly the eager one's launch. (In the probe, cooperative with PDL left
// 1.5-1.6 us where the cooperative attribute alone left 1.11 us; that kernel also ended with a
// grid-wide sync, which without PDL left 2.0 us: PDL on a cooperative launch is not measured on its
// own, nor tried on the generated kernels.) The attribute is
// set only where the kernel was compiled for compute capability 9.0 or later (earlier, the kernel has
// no wait, and overlapping it with the kernel before would break stream order); every kernel of a
// program is compiled for one architecture, so the first one launched answers for all.
// CW_NV_ALWAYS_COOPERATIVE=1 in the environment launches every kernel cooperatively (to measure
// what the plain launch saves, side by side); CW_NV_PDL=1 launches the plain ones with PDL
// (to measure what PDL saves; off by default, see above).
static bool cw_nv_pdl_allowed(const void* kernel) {
  if (getenv("CW_NV_PDL") == nullptr) return false;  // asked for only (see above)
  cudaFuncAttributes f;
  if (cudaFuncGetAttributes(&f, kernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return f.ptxVersion >= 90;  // the virtual architecture the kernel was compiled for (__CUDA_ARCH__ / 10)
}
static void cw_nv_launch(const void* kernel, void* args, cudaStream_t s, bool needs_cooperative) {
  void* params[] = {args};
  static const bool always = getenv("CW_NV_ALWAYS_COOPERATIVE") != nullptr;
  static const bool pdl_asked = cw_nv_pdl_allowed(kernel);
  const bool pdl = pdl_asked && cw_nv_grid == 1;
  bool cooperative = always || needs_cooperative;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CW_CUDA(cudaStreamIsCapturing(s, &capture));
  if (capture == cudaStreamCaptureStatusActive || !cooperative) {
    cudaLaunchAttribute attribute;
    if (cooperative) {
      attribute.id = cudaLaunchAttributeCooperative;
      attribute.val.cooperative = 1;
    } else {
      attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attribute.val.programmaticStreamSerializationAllowed = 1;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(cw_nv_grid);
    config.blockDim = dim3(CW_NV_THREADS);
    config.dynamicSmemBytes = 0;
    config.stream = s;
    config.attrs = &attribute;
    config.numAttrs = cooperative || pdl ? 1 : 0;
    CW_CUDA(cudaLaunchKernelExC(&config, kernel, params));
  } else {
    CW_NV(nvshmemx_collective_launch(kernel, dim3(cw_nv_grid), dim3(CW_NV_THREADS), params, 0, s));
  }
}
// ---------------------------------------------------------------------- end of the NVSHMEM pieces
