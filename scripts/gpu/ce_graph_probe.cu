// One device-to-device cudaMemcpyAsync of N bytes, issued eagerly on a stream and as the one node of a
// captured CUDA graph, on one GPU: does a copy in a graph move at the copy engine's rate at every size?
// (results/h200/one_gpu/copy_engine: a 1 GiB put on the copy engine took 515 us eagerly, 786 us in a graph.)
// Prints one JSON line per size and mode: the median and min of 10 timed runs (CUDA events), after 2 warm-ups.
// Build: nvcc -O2 -arch=sm_90 ce_graph_probe.cu -o ce_graph_probe
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s failed: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

static float time_once(cudaStream_t s, cudaEvent_t a, cudaEvent_t b, void* dst, const void* src, size_t n,
                       cudaGraphExec_t exec) {
  CK(cudaEventRecord(a, s));
  if (exec) CK(cudaGraphLaunch(exec, s));
  else CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms * 1000.0f;
}

int main() {
  const size_t most = 2ull << 30;
  char *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, most));
  CK(cudaMalloc(&dst, most));
  CK(cudaMemset(src, 1, most));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const size_t sizes[] = {64ull << 20, 256ull << 20, 512ull << 20, 768ull << 20, 1ull << 30, (3ull << 30) / 2, 2ull << 30};
  for (size_t n : sizes) {
    for (int graph = 0; graph < 2; ++graph) {
      cudaGraphExec_t exec = nullptr;
      cudaGraph_t g = nullptr;
      if (graph) {
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&exec, g, 0));
      }
      std::vector<float> us;
      for (int i = 0; i < 12; ++i) {
        float t = time_once(s, a, b, dst, src, n, exec);
        if (i >= 2) us.push_back(t);
      }
      std::sort(us.begin(), us.end());
      float median = (us[4] + us[5]) / 2;
      printf("{\"bytes\": %zu, \"mode\": \"%s\", \"median_us\": %.1f, \"min_us\": %.1f, \"GBs\": %.1f}\n", n,
             graph ? "graph" : "eager", median, us[0], n / (median * 1e3));
      fflush(stdout);
      if (exec) CK(cudaGraphExecDestroy(exec));
      if (g) CK(cudaGraphDestroy(g));
    }
  }
  return 0;
}
