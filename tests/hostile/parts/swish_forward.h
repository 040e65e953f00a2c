// Part of hostile candidates: kb_forward for candidates whose attack is elsewhere.
extern "C" int kb_forward(const KBTensor* inputs, const KBTensor*, KBTensor* outputs, cudaStream_t stream) {
  return launch_swish(inputs, outputs, stream);
}
