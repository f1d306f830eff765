// backend/cuda/graph.h — stream capture and CUDA graphs behind a narrow host API (no CUDA
// header), for CudaBackend's --cuda-graphs: the ops of a forward are captured on the backend's
// stream and replayed as one device-side launch.
//
// Invariants:
//   * Capture uses cudaStreamCaptureModeThreadLocal: a capture-unsafe call on the capturing
//     thread (a synchronous copy, a device / stream synchronization, an allocation) fails and
//     invalidates the capture; it is reported as an error Status, never an abort.
//   * Captured work does not run until the graph is launched: between capture_begin and
//     capture_end nothing issued on the stream executes.
//   * graph_exec_update() either updates every node's parameters (same topology: node count,
//     types and edges; kernel functions and arguments may differ) or reports false and
//     leaves nothing pending (the update's error is cleared).
#pragma once

#include <cstddef>

#include "backend/cuda/cuda_kernels.h"
#include "core/status.h"

struct CUgraph_st;      // = cudaGraph_t's pointee
struct CUgraphExec_st;  // = cudaGraphExec_t's pointee

namespace ds4::cuda {

using Graph = CUgraph_st*;
using GraphExec = CUgraphExec_st*;

// Starts capturing `stream` (thread-local mode).
Status capture_begin(Stream stream);
// Ends the capture of `stream`: *graph = what was captured (owned by the caller: graph_destroy)
// and *n_nodes its node count. An error when the capture was invalidated (a capture-unsafe call
// in between); *graph is then nullptr.
Status capture_end(Stream stream, Graph* graph, size_t* n_nodes);
// true while `stream` is being captured.
bool capturing(Stream stream);
// An executable graph of `graph` (owned by the caller: graph_exec_destroy).
Status graph_instantiate(GraphExec* exec, Graph graph);
// exec takes graph's parameters when the topologies match (true); false otherwise.
bool graph_exec_update(GraphExec exec, Graph graph);
// Launches exec on `stream`, ordered with the stream's other work.
Status graph_launch(GraphExec exec, Stream stream);
void graph_destroy(Graph graph);
void graph_exec_destroy(GraphExec exec);

}  // namespace ds4::cuda
