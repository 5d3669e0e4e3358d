// clockworks_dist/torch/shim.cu: what a PyTorch process needs beside an emitted library, compiled
// into the same shared object (relocatable device code, NVSHMEM's device library linked into it).
//
// - NVSHMEM from a unique id (the caller carries the id between processes: torch.distributed's store).
//   Initialising from inside this shared object matters: NVSHMEM's device state lives in the module
//   its device library is linked into, and nvshmemi_init_thread (from that device library) fills in
//   this module's copy, the one the library's kernels read.
// - One native call per collective (cwt_all_reduce): the caller's stream and the library's own stream
//   joined by events, the copies in and out, the library's run. Under a CUDA graph capture the
//   events make the library's stream part of the capture (a fork and a join), so the library always
//   sees one stream, capturing or not, as it asks.
// Standard C++ and the CUDA runtime only; no name from a schedule appears here (the library's run
// entry arrives as a function pointer).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

namespace {
char cwt_message[512] = "";
cudaEvent_t cwt_forked = nullptr;   // recorded on the caller's stream: the library's stream waits on it
cudaEvent_t cwt_joined = nullptr;   // recorded on the library's stream: the caller's stream waits on it

int cwt_fail(int code, const char* call, const char* why, int line) {
  snprintf(cwt_message, sizeof cwt_message, "%s failed: %s (shim line %d)", call, why ? why : "?", line);
  return code;
}
}  // namespace

#define CWT_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) \
  return cwt_fail(-1, #x, cudaGetErrorString(e_), __LINE__); } while (0)

typedef int (*cwt_run_fn)(size_t bytes, cudaStream_t stream);

extern "C" {

const char* cwt_last_error(void) { return cwt_message; }

int cwt_uniqueid_bytes(void) { return (int)sizeof(nvshmemx_uniqueid_t); }

// The NVSHMEM version this object was compiled against: major * 10000 + minor * 100 + patch.
int cwt_nvshmem_version(void) {
  return NVSHMEM_VENDOR_MAJOR_VERSION * 10000 + NVSHMEM_VENDOR_MINOR_VERSION * 100 + NVSHMEM_VENDOR_PATCH_VERSION;
}

// nvshmemx_init_status(): 0 not initialised, higher once initialised (NVSHMEM_STATUS_*).
int cwt_init_status(void) { return nvshmemx_init_status(); }
int cwt_initialised_status(void) { return (int)NVSHMEM_STATUS_IS_INITIALIZED; }

int cwt_get_uniqueid(void* out, size_t bytes) {
  if (bytes != sizeof(nvshmemx_uniqueid_t) || out == nullptr)
    return cwt_fail(-1, "cwt_get_uniqueid", "the buffer is not sizeof(nvshmemx_uniqueid_t)", __LINE__);
  nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
  int status = nvshmemx_get_uniqueid(&id);
  if (status != 0) {
    char b[64];
    snprintf(b, sizeof b, "NVSHMEM status %d", status);
    return cwt_fail(status, "nvshmemx_get_uniqueid", b, __LINE__);
  }
  memcpy(out, &id, sizeof id);
  return 0;
}

// NVSHMEM on `device` as PE `rank` of `world`, from rank 0's unique id; NVSHMEM_SYMMETRIC_SIZE is set
// to `heap_bytes` unless the environment already sets it. What nvshmemx_init_attr does, without its
// exit(-1) on failure: the caller (a Python process under torchrun) gets the status and says why.
int cwt_init(int rank, int world, const void* id_bytes, size_t bytes, unsigned long long heap_bytes, int device) {
  if (bytes != sizeof(nvshmemx_uniqueid_t) || id_bytes == nullptr)
    return cwt_fail(-1, "cwt_init", "the unique id is not sizeof(nvshmemx_uniqueid_t) bytes", __LINE__);
  CWT_CUDA(cudaSetDevice(device));
  char heap[32];
  snprintf(heap, sizeof heap, "%llu", heap_bytes);
  setenv("NVSHMEM_SYMMETRIC_SIZE", heap, 0);
  nvshmemx_uniqueid_t id;
  memcpy(&id, id_bytes, sizeof id);
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  int status = nvshmemx_set_attr_uniqueid_args(rank, world, &id, &attr);
  if (status != 0) return cwt_fail(status, "nvshmemx_set_attr_uniqueid_args", "bad rank, world or id", __LINE__);
  int provided = 0;
  nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                NVSHMEM_VENDOR_PATCH_VERSION};
  status = nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided, NVSHMEMX_INIT_WITH_UNIQUEID, &attr, version);
  if (status != 0) {
    char b[96];
    snprintf(b, sizeof b, "NVSHMEM status %d (NVSHMEM_DEBUG=INFO says why)", status);
    return cwt_fail(status, "nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID)", b, __LINE__);
  }
  if (cwt_forked == nullptr) CWT_CUDA(cudaEventCreateWithFlags(&cwt_forked, cudaEventDisableTiming));
  if (cwt_joined == nullptr) CWT_CUDA(cudaEventCreateWithFlags(&cwt_joined, cudaEventDisableTiming));
  return 0;
}

int cwt_my_pe(void) { return nvshmem_my_pe(); }
int cwt_n_pes(void) { return nvshmem_n_pes(); }

int cwt_finalize(void) {
  CWT_CUDA(cudaDeviceSynchronize());
  nvshmem_finalize();
  if (cwt_forked) CWT_CUDA(cudaEventDestroy(cwt_forked));
  if (cwt_joined) CWT_CUDA(cudaEventDestroy(cwt_joined));
  cwt_forked = cwt_joined = nullptr;
  return 0;
}

// One collective: `src` (in_bytes) copied into the library's input buffer `lib_in` unless it is that
// buffer, the library's run at `bytes` on `own`, the output buffer `lib_out` copied into `dst`
// (out_bytes) unless dst is null or that buffer. When `caller` is not `own`, `own` first waits for
// the caller's work so far and the caller then waits for all of it: to the caller the call is
// ordered on its own stream, as torch.distributed's collectives are. Returns 0; the library's status
// (> 0, its last_error says why); or -1 for a CUDA call of the shim's (cwt_last_error).
int cwt_all_reduce(void* run, size_t bytes, cudaStream_t caller, cudaStream_t own, void* lib_in, const void* src,
                   size_t in_bytes, void* dst, const void* lib_out, size_t out_bytes) {
  if (run == nullptr || cwt_forked == nullptr)
    return cwt_fail(-1, "cwt_all_reduce", "not initialised (cwt_init first)", __LINE__);
  bool fork = caller != own;
  if (fork) {
    CWT_CUDA(cudaEventRecord(cwt_forked, caller));
    CWT_CUDA(cudaStreamWaitEvent(own, cwt_forked, 0));
  }
  if (src != nullptr && src != lib_in && in_bytes)
    CWT_CUDA(cudaMemcpyAsync(lib_in, src, in_bytes, cudaMemcpyDeviceToDevice, own));
  int status = ((cwt_run_fn)run)(bytes, own);
  if (status == 0 && dst != nullptr && dst != lib_out && out_bytes)
    CWT_CUDA(cudaMemcpyAsync(dst, lib_out, out_bytes, cudaMemcpyDeviceToDevice, own));
  if (fork) {
    // joined even after a failed run: a capture must not end with the library's stream left in it
    CWT_CUDA(cudaEventRecord(cwt_joined, own));
    CWT_CUDA(cudaStreamWaitEvent(caller, cwt_joined, 0));
  }
  return status;
}

}  // extern "C"
