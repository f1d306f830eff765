// backend/cuda/graph.cu — stream capture and CUDA graph wrappers (see graph.h).
#include <cuda_runtime.h>

#include "backend/cuda/graph.h"

namespace ds4::cuda {

namespace {

Status graph_error(const char* what, cudaError_t e) {
  return resource_error("cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace

Status capture_begin(Stream stream) {
  const cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  return e == cudaSuccess ? Status() : graph_error("cudaStreamBeginCapture", e);
}

Status capture_end(Stream stream, Graph* graph, size_t* n_nodes) {
  *graph = nullptr;
  *n_nodes = 0;
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream, &g);
  if (e != cudaSuccess) {
    if (g != nullptr) cudaGraphDestroy(g);
    (void)cudaGetLastError();
    return graph_error("cudaStreamEndCapture (the capture was invalidated by a capture-unsafe call)", e);
  }
  size_t n = 0;
  const cudaError_t ne = cudaGraphGetNodes(g, nullptr, &n);
  if (ne != cudaSuccess) {
    cudaGraphDestroy(g);
    return graph_error("cudaGraphGetNodes", ne);
  }
  *graph = g;
  *n_nodes = n;
  return Status();
}

bool capturing(Stream stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &st) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return st != cudaStreamCaptureStatusNone;
}

Status graph_instantiate(GraphExec* exec, Graph graph) {
  cudaGraphExec_t x = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&x, graph, 0);
  *exec = e == cudaSuccess ? x : nullptr;
  return e == cudaSuccess ? Status() : graph_error("cudaGraphInstantiate", e);
}

bool graph_exec_update(GraphExec exec, Graph graph) {
  cudaGraphExecUpdateResultInfo info{};
  const cudaError_t e = cudaGraphExecUpdate(exec, graph, &info);
  if (e == cudaSuccess) return true;
  (void)cudaGetLastError();  // a topology change is not a fault: clear it, re-instantiate
  return false;
}

Status graph_launch(GraphExec exec, Stream stream) {
  const cudaError_t e = cudaGraphLaunch(exec, stream);
  return e == cudaSuccess ? Status() : graph_error("cudaGraphLaunch", e);
}

void graph_destroy(Graph graph) {
  if (graph != nullptr) cudaGraphDestroy(graph);
}

void graph_exec_destroy(GraphExec exec) {
  if (exec != nullptr) cudaGraphExecDestroy(exec);
}

}  // namespace ds4::cuda
