// KernelBlaster test driver: runs one candidate's kb_forward in its own process, on buffers the trusted
// Python harness owns and shares through CUDA IPC, and answers a one-line JSON protocol.
//
// Built once per GPU arch into its own shared library (kb_driver.map: it exports kb_driver_main alone, and is
// linked -z now -Bsymbolic, so every call it makes is bound to its
// own code or its libraries before any candidate code exists in the process). Each candidate is a second
// shared library (exporting kb_forward alone) that the launcher (kb_launcher.c) loads after this one, with
// RTLD_LOCAL, once it has confined the process; nothing here can bind to a candidate's symbol. The launcher
// then calls kb_driver_main with the protocol's file descriptor and the candidate's kb_forward. A crash,
// hang or sticky CUDA error in the candidate kills only this process. The reference output never enters it.
//
// Protocol (one JSON object per line on stdin, exactly one JSON object per line in reply on the protocol
// fd; every reply has "ok" and echoes the request's "seq"; errors have "error", "fatal" when the driver
// exits after the reply, and "rc" when kb_forward returned nonzero). Once loaded, before reading any
// request, the driver announces itself with {"seq":0,"ok":true}; the harness numbers requests from 1.
//   {"cmd":"setup","seq":S,"device":D,"flush_bytes":N,
//    "sets":[{"inputs":[T..],"params":[T..],"outputs":[T..]}..],"mark_initialized":false}
//       T = {"handle":"<128 hex chars>","offset":B,"dtype":KBDtype,"shape":[..],"strides":[..]}
//   {"cmd":"run","seq":S,"set":i}                          -> {"seq":S,"ok":true,"rc":0}
//   {"cmd":"batch","seq":S,"sets":[i..]}                    -> {"seq":S,"ok":true,"calls":n}
//       one call per listed set, back to back on the stream (no synchronisation between them), then one
//       device-wide synchronise and the reply; an empty list only synchronises. Verification (batches of
//       set 0) and the trusted timing (harness/timing.py, batches of every set) both call the candidate this
//       way, with the same poisoning, and both check what the calls wrote.
//   {"cmd":"time","seq":S,"warmup":W,"iters":N,"sets":[..],"flush":true,"poison":true}
//                    -> {"seq":S,"ok":true,"event_ms":[..],"incomplete_calls":k,"policy_windows":m}
//   {"cmd":"profile","seq":S,"warmup":W,"set":i}           -> {"seq":S,"ok":true}
//   {"cmd":"exit","seq":S}                                 -> {"seq":S,"ok":true}, then exit status 0
// A CUDA error exits with status 3 after the reply (sticky errors leave the context unusable). The
// sequence numbers let the harness tell the driver's replies from lines a hostile candidate writes into
// the protocol; what a candidate could still fake is cross-checked by the harness (driver_process.py).
// Requests are read and replies written with read(2) and write(2), and every number in them goes through
// kb_json.h's locale-free conversions: the candidate may change the process's C or C++ locale (or stdio's
// state), and none of that reaches the protocol.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kb_abi.h"
#include "kb_json.h"

using kbjson::RequestError;
using kbjson::Value;

// Outputs are poisoned with this byte before timed calls (a NaN pattern for every float type). The
// candidate's own workspace is poisoned by the trusted wrappers linked into its library (kb_workspace.cu),
// on every allocation and with no switch: there is no flag in this process for a candidate to clear.
constexpr int kPoisonByte = 0xFF;

// The candidate's entry point: the launcher looks it up in the candidate's own library and hands it over,
// so nothing in the driver refers to a candidate symbol by name.
using KbForward = int (*)(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t);
static KbForward g_forward = nullptr;

// ---------------------------------------------------------------------------------------------------
// Failures. RequestError (bad request) and CandidateFailed (kb_forward returned nonzero or threw) are
// answered and the driver keeps serving; CudaFailure is answered and the driver exits with status 3.
// ---------------------------------------------------------------------------------------------------
struct CudaFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CandidateFailed : std::runtime_error {
  int rc;
  CandidateFailed(const std::string& what, int rc_) : std::runtime_error(what), rc(rc_) {}
};

constexpr int kExitCudaError = 3;

static void check(cudaError_t err, const std::string& context) {
  if (err == cudaSuccess) return;
  throw CudaFailure(std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) + " (" + context +
                    ")");
}

// ---------------------------------------------------------------------------------------------------
// Session state: the IPC mappings, the tensor sets, the stream, the timing events and the flush buffer.
// ---------------------------------------------------------------------------------------------------
struct TensorSet {
  std::vector<KBTensor> inputs, params, outputs;
};

struct Session {
  bool ready = false;
  std::map<std::string, void*> mapped;  // hex IPC handle -> base address in this process
  std::vector<TensorSet> sets;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* flush_buffer = nullptr;
  size_t flush_bytes = 0;
  bool persisting_l2 = false;  // the GPU can set L2 lines aside as persisting (Ampere and later)
  int fingerprint_blocks = 0;
};

// ---------------------------------------------------------------------------------------------------
// Request field access: every shape error becomes a RequestError naming the field.
// ---------------------------------------------------------------------------------------------------
static const Value& field(const Value& obj, const char* key, Value::Kind kind, const char* kind_name) {
  const Value* v = obj.find(key);
  if (v == nullptr || v->kind != kind) throw RequestError(std::string("field '") + key + "' must be " + kind_name);
  return *v;
}

static int64_t as_int(const Value& v, const std::string& what) {
  if (v.kind != Value::Number || !v.is_integer) throw RequestError(what + " must be an integer");
  return v.integer;
}

static int64_t int_field(const Value& obj, const char* key, int64_t fallback, int64_t minimum) {
  const Value* v = obj.find(key);
  int64_t n = v == nullptr ? fallback : as_int(*v, std::string("field '") + key + "'");
  if (n < minimum) throw RequestError(std::string("field '") + key + "' must be >= " + std::to_string(minimum));
  return n;
}

static bool bool_field(const Value& req, const char* key, bool fallback) {
  const Value* v = req.find(key);
  if (v == nullptr) return fallback;
  if (v->kind != Value::Bool) throw RequestError(std::string("field '") + key + "' must be a boolean");
  return v->boolean;
}

static size_t set_index(const Session& s, const Value& v) {
  int64_t i = as_int(v, "a set index");
  if (i < 0 || static_cast<size_t>(i) >= s.sets.size())
    throw RequestError("set " + std::to_string(i) + " does not exist (" + std::to_string(s.sets.size()) +
                       " sets were set up)");
  return static_cast<size_t>(i);
}

// ---------------------------------------------------------------------------------------------------
// setup
// ---------------------------------------------------------------------------------------------------
static cudaIpcMemHandle_t decode_handle(const std::string& hex) {
  cudaIpcMemHandle_t handle;
  if (hex.size() != 2 * sizeof handle.reserved)
    throw RequestError("an IPC handle must be " + std::to_string(2 * sizeof handle.reserved) + " hex characters");
  for (size_t i = 0; i < sizeof handle.reserved; ++i) {
    int high = kbjson::hex_digit(hex[2 * i]), low = kbjson::hex_digit(hex[2 * i + 1]);
    if (high < 0 || low < 0) throw RequestError("an IPC handle is not hex");
    handle.reserved[i] = static_cast<char>(high * 16 + low);
  }
  return handle;
}

// Each allocation is opened once: CUDA refuses to map the same handle twice in one process.
static char* mapped_base(Session& s, const std::string& hex, const std::string& what) {
  auto it = s.mapped.find(hex);
  if (it != s.mapped.end()) return static_cast<char*>(it->second);
  void* base = nullptr;
  check(cudaIpcOpenMemHandle(&base, decode_handle(hex), cudaIpcMemLazyEnablePeerAccess),
        "opening the IPC handle of " + what);
  s.mapped[hex] = base;
  return static_cast<char*>(base);
}

static std::vector<int64_t> int_list(const Value& array, const std::string& what) {
  std::vector<int64_t> out;
  for (const Value& item : array.items) out.push_back(as_int(item, what + " entries"));
  return out;
}

static KBTensor parse_tensor(Session& s, const Value& t, const std::string& what) {
  if (t.kind != Value::Object) throw RequestError(what + " must be an object");
  std::vector<int64_t> shape = int_list(field(t, "shape", Value::Array, "an array"), what + " shape");
  std::vector<int64_t> strides = int_list(field(t, "strides", Value::Array, "an array"), what + " strides");
  KBTensor tensor;
  std::memset(&tensor, 0, sizeof tensor);
  if (shape.size() != strides.size() || shape.size() > sizeof tensor.shape / sizeof tensor.shape[0])
    throw RequestError(what + ": shape and strides must have the same length, at most 8");
  // Extents (and initcheck's marking of them) assume the layout PyTorch gives a dense or expanded tensor.
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < 0 || strides[d] < 0) throw RequestError(what + ": shape and strides must not be negative");
  const std::string& hex = field(t, "handle", Value::String, "a string").text;
  tensor.data = mapped_base(s, hex, what) + int_field(t, "offset", 0, 0);
  tensor.dtype = static_cast<int32_t>(int_field(t, "dtype", -1, 0));
  tensor.ndim = static_cast<int32_t>(shape.size());
  std::copy(shape.begin(), shape.end(), tensor.shape);
  std::copy(strides.begin(), strides.end(), tensor.strides);
  return tensor;
}

static std::vector<KBTensor> parse_tensors(Session& s, const Value& set, const char* role, size_t set_no) {
  std::vector<KBTensor> out;
  const Value& list = field(set, role, Value::Array, "an array");
  for (size_t i = 0; i < list.items.size(); ++i) {
    std::string what = std::string(role) + "[" + std::to_string(i) + "] of set " + std::to_string(set_no);
    out.push_back(parse_tensor(s, list.items[i], what));
  }
  return out;
}

// Memory the candidate frees with cudaFreeAsync stays in the device's pool instead of going back to the OS
// at every synchronise (the pool's default), so stream-ordered workspace costs what PyTorch's caching
// allocator costs the baseline, not a remap per call.
static void keep_pool_memory(int device) {
  int pools = 0;
  check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device), "reading pool support");
  if (!pools) return;
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, device), "reading the default memory pool");
  uint64_t keep_all = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all), "keeping pool memory");
}

// compute-sanitizer's initcheck cannot see that the harness wrote the inputs and parameters in its own
// process: to it every byte mapped through IPC is uninitialized, and reporting each read of them makes a
// sanitized call run for hours. Copying them through host memory and back counts as writing them. Outputs
// are left as they are, so a candidate that reads an output before writing it is still reported.
static size_t extent_bytes(const KBTensor& t) {
  size_t last = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 0) return 0;
    last += static_cast<size_t>(t.shape[d] - 1) * static_cast<size_t>(t.strides[d]);
  }
  return (last + 1) * kb_dtype_size(t.dtype);
}

static void mark_initialized(const std::vector<KBTensor>& tensors) {
  constexpr size_t kChunk = size_t{64} << 20;
  std::vector<char> host;
  for (const KBTensor& t : tensors) {
    char* data = static_cast<char*>(t.data);
    for (size_t done = 0, total = extent_bytes(t); done < total; done += kChunk) {
      size_t n = std::min(kChunk, total - done);
      host.resize(std::max(host.size(), n));
      check(cudaMemcpy(host.data(), data + done, n, cudaMemcpyDeviceToHost), "reading an input for initcheck");
      check(cudaMemcpy(data + done, host.data(), n, cudaMemcpyHostToDevice), "rewriting an input for initcheck");
    }
  }
}

static std::string handle_setup(Session& s, const Value& req) {
  if (s.ready) throw RequestError("setup was already done");
  check(cudaSetDevice(static_cast<int>(int_field(req, "device", 0, 0))), "selecting the device");
  std::vector<TensorSet> sets;
  const Value& set_list = field(req, "sets", Value::Array, "an array");
  for (size_t i = 0; i < set_list.items.size(); ++i) {
    const Value& set = set_list.items[i];
    if (set.kind != Value::Object) throw RequestError("each entry of 'sets' must be an object");
    sets.push_back({parse_tensors(s, set, "inputs", i), parse_tensors(s, set, "params", i),
                    parse_tensors(s, set, "outputs", i)});
  }
  if (sets.empty()) throw RequestError("setup needs at least one tensor set");
  if (bool_field(req, "mark_initialized", false))
    for (const TensorSet& set : sets) {
      mark_initialized(set.inputs);
      mark_initialized(set.params);
    }
  s.flush_bytes = static_cast<size_t>(int_field(req, "flush_bytes", 0, 0));
  check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "creating the stream");
  check(cudaEventCreate(&s.start), "creating the start event");
  check(cudaEventCreate(&s.stop), "creating the stop event");
  if (s.flush_bytes > 0) check(cudaMalloc(&s.flush_buffer, s.flush_bytes), "allocating the L2 flush buffer");
  int device = 0, persisting_max = 0, sms = 0;
  check(cudaGetDevice(&device), "reading the device");
  check(cudaDeviceGetAttribute(&persisting_max, cudaDevAttrMaxPersistingL2CacheSize, device), "reading L2 limits");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "reading the SM count");
  // A GPU without persisting L2, or one that refuses the reset (MIG), gets no clearing.
  s.persisting_l2 = persisting_max > 0 && cudaCtxResetPersistingL2Cache() == cudaSuccess;
  cudaGetLastError();
  s.fingerprint_blocks = 2 * sms;
  keep_pool_memory(device);
  s.sets = std::move(sets);
  s.ready = true;
  return "{\"ok\":true}";
}

// ---------------------------------------------------------------------------------------------------
// Calling the candidate
// ---------------------------------------------------------------------------------------------------

// `args` is a per-call copy of the set's descriptors, so a candidate that edits them cannot affect later
// calls; callers make it before any timed region.
static int call_candidate(TensorSet args, cudaStream_t stream, size_t set) {
  try {
    return g_forward(args.inputs.data(), args.params.data(), args.outputs.data(), stream);
  } catch (const std::exception& e) {
    throw CandidateFailed("kb_forward threw " + std::string(e.what()) + " (set " + std::to_string(set) + ")", -1);
  } catch (...) {
    throw CandidateFailed("kb_forward threw a C++ exception (set " + std::to_string(set) + ")", -1);
  }
}

// After the device-wide synchronise: any CUDA error is fatal, then a nonzero return is reported.
static void check_after_call(cudaError_t sync_result, int rc, size_t set) {
  std::string context = "after kb_forward, set " + std::to_string(set);
  check(sync_result, context);
  check(cudaGetLastError(), context);
  if (rc != 0)
    throw CandidateFailed("kb_forward returned " + std::to_string(rc) + " (set " + std::to_string(set) + ")", rc);
}

static void call_and_settle(const Session& s, size_t set) {
  int rc = call_candidate(s.sets[set], s.stream, set);
  cudaError_t err = cudaStreamSynchronize(s.stream);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  check_after_call(err, rc, set);
}

static void require_ready(const Session& s) {
  if (!s.ready) throw RequestError("send setup first");
}

static std::string handle_run(Session& s, const Value& req) {
  require_ready(s);
  size_t set = set_index(s, field(req, "set", Value::Number, "a number"));
  call_and_settle(s, set);
  return "{\"ok\":true,\"rc\":0}";
}

// ---------------------------------------------------------------------------------------------------
// batch: the calls the trusted process clocks itself (send -> reply) and checks afterwards.
// ---------------------------------------------------------------------------------------------------
static bool clear_persisting_l2(const Session& s);

// The calls are enqueued back to back and the device is synchronised once at the end, so the harness's wall
// clock around the request holds the GPU time of the calls plus a round trip it measures on its own null
// candidate. Each set has its own outputs; the harness poisoned them (and flushed L2) before sending. A
// nonzero return is reported after the synchronise, naming the first set that returned it.
static std::string handle_batch(Session& s, const Value& req) {
  require_ready(s);
  std::vector<size_t> order;
  for (const Value& v : field(req, "sets", Value::Array, "an array").items) order.push_back(set_index(s, v));
  std::vector<TensorSet> args;  // per-call copies, made before the first call
  args.reserve(order.size());
  for (size_t set : order) args.push_back(s.sets[set]);
  clear_persisting_l2(s);
  int first_rc = 0;
  size_t failed_set = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    int rc = call_candidate(std::move(args[k]), s.stream, order[k]);
    if (rc != 0 && first_rc == 0) {
      first_rc = rc;
      failed_set = order[k];
    }
  }
  cudaError_t err = cudaStreamSynchronize(s.stream);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  check_after_call(err, first_rc, failed_set);
  return "{\"ok\":true,\"calls\":" + kbjson::format_integer(static_cast<int64_t>(order.size())) + "}";
}

// ---------------------------------------------------------------------------------------------------
// time
// ---------------------------------------------------------------------------------------------------

static size_t tensor_bytes(const KBTensor& t) {
  size_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= static_cast<size_t>(t.shape[d]);
  return n * kb_dtype_size(t.dtype);
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// A position-dependent hash of `bytes` bytes, added to *slot: any change of any byte changes it. The reading
// order starts at `start` (a fraction of the buffer, from a per-call random draw, so that work racing the
// fingerprint cannot know which bytes are read first); the hash itself does not depend on the order.
__global__ void fingerprint(const unsigned char* data, size_t bytes, uint64_t salt, double start,
                            unsigned long long* slot) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool aligned = reinterpret_cast<uintptr_t>(data) % 8 == 0;
  const size_t words = aligned ? bytes / 8 : 0;
  const size_t rest = bytes - words * 8;
  const size_t word_start = static_cast<size_t>(start * words), byte_start = static_cast<size_t>(start * rest);
  uint64_t acc = 0;
  for (size_t i = first; i < words; i += stride) {
    const size_t j = i + word_start < words ? i + word_start : i + word_start - words;
    acc += mix64(reinterpret_cast<const uint64_t*>(data)[j] ^ (j * 0x9e3779b97f4a7c15ULL + salt));
  }
  for (size_t i = first; i < rest; i += stride) {
    const size_t j = words * 8 + (i + byte_start < rest ? i + byte_start : i + byte_start - rest);
    acc += mix64(data[j] ^ (~j * 0x9e3779b97f4a7c15ULL + salt));
  }
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (threadIdx.x % 32 == 0) atomicAdd(slot, static_cast<unsigned long long>(acc));
}

static void fingerprint_outputs(const Session& s, const TensorSet& set, double start, unsigned long long* slot) {
  for (size_t i = 0; i < set.outputs.size(); ++i) {
    const KBTensor& t = set.outputs[i];
    fingerprint<<<s.fingerprint_blocks, 256, 0, s.stream>>>(static_cast<const unsigned char*>(t.data),
                                                              tensor_bytes(t), 0x51ed27ULL * (i + 1), start, slot);
  }
  check(cudaGetLastError(), "fingerprinting the outputs");
}

// Persisting L2 lines would survive the flush: before every timed call they become normal lines again, and
// any access-policy window the candidate left on the stream is cleared. Returns whether one was left.
static bool clear_persisting_l2(const Session& s) {
  if (!s.persisting_l2) return false;
  cudaStreamAttrValue window;
  std::memset(&window, 0, sizeof window);
  check(cudaStreamGetAttribute(s.stream, cudaStreamAttributeAccessPolicyWindow, &window), "reading the stream");
  const bool left = window.accessPolicyWindow.num_bytes > 0;
  if (left) {
    std::memset(&window, 0, sizeof window);
    check(cudaStreamSetAttribute(s.stream, cudaStreamAttributeAccessPolicyWindow, &window), "clearing the window");
  }
  check(cudaCtxResetPersistingL2Cache(), "resetting persisting L2 lines");
  return left;
}

static std::string json_list(const std::vector<double>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + kbjson::format_double(values[i]);
  return out + "]";
}

// Zeroed device slots for the fingerprints of one time request, freed however the request ends.
struct Fingerprints {
  unsigned long long* slots = nullptr;
  explicit Fingerprints(int64_t count) {
    check(cudaMalloc(reinterpret_cast<void**>(&slots), count * sizeof *slots), "allocating fingerprints");
    check(cudaMemset(slots, 0, count * sizeof *slots), "clearing fingerprints");
    check(cudaDeviceSynchronize(), "clearing fingerprints");  // cudaMemset does not order against our stream
  }
  ~Fingerprints() { cudaFree(slots); }
  Fingerprints(const Fingerprints&) = delete;
  Fingerprints& operator=(const Fingerprints&) = delete;
};

struct TimeRequest {
  int64_t warmup, iters;
  bool flush, poison;
  std::vector<size_t> rotation;
};

static TimeRequest parse_time(const Session& s, const Value& req) {
  TimeRequest t{int_field(req, "warmup", 10, 0), int_field(req, "iters", 100, 1), bool_field(req, "flush", true),
                bool_field(req, "poison", true), {}};
  for (const Value& v : field(req, "sets", Value::Array, "an array").items) t.rotation.push_back(set_index(s, v));
  if (t.rotation.empty()) throw RequestError("field 'sets' must name at least one set");
  return t;
}

// Call k: poison the set's outputs, clear persisting L2, flush L2 and drain the device; then events on the
// stream around kb_forward (the score: GPU time on the stream) and a fingerprint of the outputs enqueued on
// the stream right after the stop event, so it reads them the moment the stream's work is done, starting at
// a random place. After a device-wide synchronise the outputs are fingerprinted again: a difference means
// work that escaped the stream was still writing them when the stream finished, and the events did not time
// it. Escaped work cannot outrun the first fingerprint either: not knowing where it starts reading, it would
// have to be done before the fingerprint begins.
static std::string handle_time(Session& s, const Value& req) {
  require_ready(s);
  const TimeRequest t = parse_time(s, req);
  const int64_t calls = t.warmup + t.iters;
  Fingerprints fingerprints(2 * calls);
  unsigned long long* slots = fingerprints.slots;
  std::vector<double> event_ms;
  int64_t windows = 0;
  std::mt19937_64 random(std::random_device{}());
  std::uniform_real_distribution<double> draw(0.0, 1.0);
  for (int64_t k = 0; k < calls; ++k) {
    size_t set = t.rotation[k % t.rotation.size()];
    if (t.poison)
      for (const KBTensor& out : s.sets[set].outputs)
        check(cudaMemsetAsync(out.data, kPoisonByte, tensor_bytes(out), s.stream), "poisoning the outputs");
    windows += clear_persisting_l2(s) ? 1 : 0;
    if (t.flush && s.flush_buffer != nullptr)
      check(cudaMemsetAsync(s.flush_buffer, static_cast<int>(k & 0xff), s.flush_bytes, s.stream), "flushing L2");
    TensorSet args = s.sets[set];
    check(cudaDeviceSynchronize(), "before kb_forward, set " + std::to_string(set));
    check(cudaEventRecord(s.start, s.stream), "recording the start event");
    int rc = call_candidate(std::move(args), s.stream, set);
    cudaError_t err = cudaEventRecord(s.stop, s.stream);
    if (err == cudaSuccess) fingerprint_outputs(s, s.sets[set], draw(random), slots + 2 * k);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    check_after_call(err, rc, set);
    fingerprint_outputs(s, s.sets[set], 0.0, slots + 2 * k + 1);
    if (k < t.warmup) continue;
    float elapsed = 0.0f;
    check(cudaEventElapsedTime(&elapsed, s.start, s.stop), "reading the timing events");
    event_ms.push_back(elapsed);
  }
  windows += clear_persisting_l2(s) ? 1 : 0;
  std::vector<unsigned long long> hashes(2 * calls);
  check(cudaMemcpy(hashes.data(), slots, hashes.size() * sizeof hashes[0], cudaMemcpyDeviceToHost),
        "reading fingerprints");
  int64_t incomplete = 0;
  for (int64_t k = 0; k < calls; ++k) incomplete += hashes[2 * k] != hashes[2 * k + 1] ? 1 : 0;
  return "{\"ok\":true,\"event_ms\":" + json_list(event_ms) + ",\"incomplete_calls\":" +
         kbjson::format_integer(incomplete) + ",\"policy_windows\":" + kbjson::format_integer(windows) + "}";
}

// ---------------------------------------------------------------------------------------------------
// profile: only the last call runs between cudaProfilerStart/Stop, for `ncu --profile-from-start off`.
// ---------------------------------------------------------------------------------------------------
static std::string handle_profile(Session& s, const Value& req) {
  require_ready(s);
  size_t set = set_index(s, field(req, "set", Value::Number, "a number"));
  int64_t warmup = int_field(req, "warmup", 3, 0);
  for (int64_t k = 0; k < warmup; ++k) call_and_settle(s, set);
  check(cudaProfilerStart(), "starting the profiler");
  call_and_settle(s, set);
  check(cudaProfilerStop(), "stopping the profiler");
  return "{\"ok\":true}";
}

// ---------------------------------------------------------------------------------------------------
// Teardown and the request loop
// ---------------------------------------------------------------------------------------------------
static void teardown(Session& s) {
  if (s.flush_buffer != nullptr) cudaFree(s.flush_buffer);
  if (s.start != nullptr) cudaEventDestroy(s.start);
  if (s.stop != nullptr) cudaEventDestroy(s.stop);
  if (s.stream != nullptr) cudaStreamDestroy(s.stream);
  for (const auto& entry : s.mapped) cudaIpcCloseMemHandle(entry.second);
  s = Session();
}

static int g_protocol = -1;

// Every reply carries the sequence number of its request (-1: the request had none, or did not parse).
// Written with write(2), whole, so nothing of stdio's state (orientation, buffers) is in the way.
static void send(int64_t seq, const std::string& reply) {
  std::string framed = reply;
  if (seq >= 0) framed.insert(1, "\"seq\":" + kbjson::format_integer(seq) + ",");
  framed += '\n';
  for (size_t done = 0; done < framed.size();) {
    ssize_t n = write(g_protocol, framed.data() + done, framed.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the harness has gone: it reads the driver's end, not this reply
    done += static_cast<size_t>(n);
  }
}

// Requests, one a line, read from fd 0 with read(2): no stream, so no locale or codecvt, stands between the
// harness's bytes and the parser.
class RequestReader {
 public:
  // The next line without its '\n' (a last line without one counts); false at the end of input.
  bool next(std::string& line) {
    for (;;) {
      size_t newline = buffer_.find('\n', scanned_);
      if (newline != std::string::npos) {
        line.assign(buffer_, 0, newline);
        buffer_.erase(0, newline + 1);
        scanned_ = 0;
        return true;
      }
      scanned_ = buffer_.size();
      if (ended_) {
        if (buffer_.empty()) return false;
        line.swap(buffer_);
        buffer_.clear();
        scanned_ = 0;
        return true;
      }
      char chunk[65536];
      ssize_t n = read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ended_ = true;
      else buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  std::string buffer_;
  size_t scanned_ = 0;
  bool ended_ = false;
};

// `rc` is kb_forward's return value (-1 when it threw); `fatal` tells the harness the driver exits next.
static std::string error_reply(const std::string& message, bool fatal, const int* rc) {
  std::string out = "{\"ok\":false,\"error\":" + kbjson::quote(message);
  if (fatal) out += ",\"fatal\":true";
  if (rc != nullptr) out += ",\"rc\":" + kbjson::format_integer(*rc);
  return out + "}";
}

// Returns the reply; sets `exit_requested` for {"cmd":"exit"}.
static std::string handle_request(Session& s, const Value& req, bool& exit_requested) {
  const std::string& cmd = field(req, "cmd", Value::String, "a string").text;
  if (cmd == "setup") return handle_setup(s, req);
  if (cmd == "run") return handle_run(s, req);
  if (cmd == "batch") return handle_batch(s, req);
  if (cmd == "time") return handle_time(s, req);
  if (cmd == "profile") return handle_profile(s, req);
  if (cmd == "exit") {
    teardown(s);
    exit_requested = true;
    return "{\"ok\":true}";
  }
  throw RequestError("unknown cmd '" + cmd + "' (expected setup, run, batch, time, profile or exit)");
}

// The request as a JSON object and its sequence number; a request that does not parse is answered
// without one.
static Value parse_request(const std::string& line, int64_t& seq) {
  seq = -1;
  Value req = kbjson::Parser(line).parse_document();
  if (req.kind != Value::Object) throw RequestError("a request must be a JSON object");
  seq = int_field(req, "seq", -1, -1);
  return req;
}

// Called by the launcher once it has confined the process, pointed fd 1 at stderr (so whatever the
// candidate prints, printf, std::cout or device printf, goes to stderr; replies go to `protocol_fd`) and
// loaded the candidate's library, with the candidate's kb_forward.
extern "C" __attribute__((visibility("default"))) int kb_driver_main(int protocol_fd, KbForward forward) {
  g_forward = forward;
  g_protocol = protocol_fd;
  send(0, "{\"ok\":true}");
  Session session;
  RequestReader requests;
  std::string line;
  while (requests.next(line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    bool exit_requested = false;
    int64_t seq = -1;
    try {
      Value req = parse_request(line, seq);
      send(seq, handle_request(session, req, exit_requested));
      if (exit_requested) return 0;
    } catch (const CudaFailure& e) {
      send(seq, error_reply(e.what(), true, nullptr));
      std::fflush(stdout);
      // _exit: with a broken context, cudart's exit-time teardown can itself fail or hang.
      _exit(kExitCudaError);
    } catch (const CandidateFailed& e) {
      send(seq, error_reply(e.what(), false, &e.rc));
    } catch (const std::exception& e) {
      send(seq, error_reply(e.what(), false, nullptr));
    }
  }
  teardown(session);
  return 0;
}
