// HOSTILE: adds a host-function node to a CUDA graph through the generic cudaGraphAddNode with the node
// type as a bare number (no host-callback name for a rule to see); CUDA runs the function on its own
// thread, which runs a shell with a raw execve. The filter holds on every thread of the driver: the
// verdict is sandbox_violation (execve).
#include "kb_problem.h"

static void CUDART_CB run_shell(void*) {
  static const char* argv[] = {"/bin/sh", "-c", "id", nullptr};
  static const char* envp[] = {nullptr};
  sys(59, reinterpret_cast<long>(argv[0]), reinterpret_cast<long>(argv), reinterpret_cast<long>(envp));
}

static int launch_host_node(cudaStream_t stream) {
  cudaGraph_t graph;
  cudaGraphNode_t node;
  cudaGraphExec_t exec;
  cudaGraphNodeParams params = {};
  params.type = static_cast<cudaGraphNodeType>(3);
  params.host.fn = run_shell;
  if (cudaGraphCreate(&graph, 0) != cudaSuccess) return 1;
#if CUDART_VERSION >= 13000
  if (cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params) != cudaSuccess) return 1;
#else
  if (cudaGraphAddNode(&node, graph, nullptr, 0, &params) != cudaSuccess) return 1;
#endif
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return 1;
  return cudaGraphLaunch(exec, stream) == cudaSuccess ? 0 : 1;
}

extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  if (launch_host_node(stream) != 0) return 2;
  return launch_swish(inputs, outputs, stream);
}
