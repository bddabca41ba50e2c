#include "core/compat.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/version.h>

#ifdef GLINT_CUDA
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>

#include "core/blas.h"
#include "core/error.h"
#include "core/grouped_linear.h"

// 2.x: the public scaled_dot_product_attention (2.0), TCPStoreOptions::useLibUV (2.3),
// flash attention's variable-length form with optional offsets (2.4), at::_grouped_mm with
// its autograd formula (2.8).
#define GLINT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace glint::compat {

std::string torch_version() { return TORCH_VERSION; }

void set_cpu_threads(int threads) {
  GLINT_ASSERT(threads > 0);
  at::set_num_threads(threads);
  blas::set_threads(threads);
}

namespace {

// The allocators' report hook. Its totals changed type (int64_t in 1.x, size_t in 2.x):
// both forms are declared, and the one the base class has is the override.
class AllocationObserver : public c10::MemoryReportingInfoBase {
 public:
  explicit AllocationObserver(std::function<void(void*, int64_t)> fn) : fn_(std::move(fn)) {}
  void reportMemoryUsage(void* ptr, int64_t bytes, int64_t, int64_t, c10::Device) { fn_(ptr, bytes); }
  void reportMemoryUsage(void* ptr, int64_t bytes, size_t, size_t, c10::Device) { fn_(ptr, bytes); }
  bool memoryProfilingEnabled() const override { return true; }

 private:
  std::function<void(void*, int64_t)> fn_;
};

}  // namespace

std::shared_ptr<void> observe_allocations(std::function<void(void* ptr, int64_t bytes)> fn) {
  const auto kind = c10::DebugInfoKind::PROFILER_STATE;
  GLINT_CHECK(!c10::ThreadLocalDebugInfo::get(kind), "allocations on this thread are already observed");
  c10::ThreadLocalDebugInfo::_push(kind, std::make_shared<AllocationObserver>(std::move(fn)));
  return std::shared_ptr<void>(nullptr, [kind](void*) { c10::ThreadLocalDebugInfo::_pop(kind); });
}

c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, const c10d::TCPStoreOptions& options) {
#if GLINT_TORCH_AT_LEAST(2, 3)
  if (options.useLibUV) {
    try {
      return c10::make_intrusive<c10d::TCPStore>(host, options);
    } catch (const std::exception& e) {
      // Only a build without libuv fails here for want of it; any other failure (the port
      // taken, rank 0 unreachable) fails the same way below and is reported from there.
      if (std::string(e.what()).find("libuv") == std::string::npos) throw;
    }
  }
  c10d::TCPStoreOptions legacy = options;
  legacy.useLibUV = false;
  return c10::make_intrusive<c10d::TCPStore>(host, legacy);
#else
  return c10::make_intrusive<c10d::TCPStore>(host, options);
#endif
}

namespace {

// The math every build can run: scores and softmax in float32 (float64 for float64), as
// transformers' eager attention does.
at::Tensor eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  auto compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor scores = at::matmul(q, k.transpose(-1, -2)).to(compute) * (1.0 / std::sqrt(double(q.size(-1))));
  if (causal) {
    const int64_t S = q.size(-2);
    at::Tensor later = at::ones({S, S}, at::TensorOptions().dtype(at::kBool).device(q.device())).triu(1);
    scores = scores.masked_fill(later, -std::numeric_limits<double>::infinity());
  }
  at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
  return at::matmul(probs, v);
}

}  // namespace

bool fused_attention_available(const at::Tensor& q) {
#if GLINT_TORCH_AT_LEAST(2, 0)
  return q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf);
#else
  (void)q;
  return false;
#endif
}

at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        bool causal) {
  GLINT_ASSERT(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention takes [B, N, S, D] tensors");
  int64_t rep = q.size(1) / k.size(1);
  GLINT_ASSERT(rep * k.size(1) == q.size(1), q.size(1), " query heads over ", k.size(1), " kv heads");
  at::Tensor kk = rep > 1 ? k.repeat_interleave(rep, 1) : k;
  at::Tensor vv = rep > 1 ? v.repeat_interleave(rep, 1) : v;
#if GLINT_TORCH_AT_LEAST(2, 0)
  if (fused_attention_available(q)) return at::scaled_dot_product_attention(q, kk, vv, {}, 0.0, causal);
#endif
  return eager_attention(q, kk, vv, causal);
}

CudaCapability cuda_capability(const c10::Device& device) {
  CudaCapability c;
  if (!device.is_cuda()) return c;
  if (const char* fake = std::getenv("GLINT_CUDA_CAPABILITY"); fake && *fake) {
    char* end = nullptr;
    c.major = int(std::strtol(fake, &end, 10));
    if (end && *end == '.') c.minor = int(std::strtol(end + 1, &end, 10));
    if (c.major <= 0 || !end || *end != '\0')
      fail("GLINT_CUDA_CAPABILITY=\"", fake, "\" is not a compute capability like 8.0");
    return c;
  }
#ifdef GLINT_CUDA
  const auto* props = at::cuda::getDeviceProperties(device.has_index() ? device.index() : c10::DeviceIndex(-1));
  c.major = props->major;
  c.minor = props->minor;
#endif
  return c;
}

bool flash_attention_runs_on(CudaCapability c) { return c.major >= 8; }

bool grouped_mm_runs_on(CudaCapability c, int torch_major, int torch_minor) {
  const bool has_it = torch_major > 2 || (torch_major == 2 && torch_minor >= 8);
  if (!has_it) return false;
  const bool before_2_9 = torch_major == 2 && torch_minor == 8;
  return before_2_9 ? c.major == 9 : (c.major == 9 || c.major == 10);
}

bool varlen_attention_available(const at::Tensor& q) {
#if GLINT_TORCH_AT_LEAST(2, 4) && defined(GLINT_CUDA)
  const int64_t D = q.size(-1);
  return q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) && D % 8 == 0 &&
         D <= 256 && flash_attention_runs_on(cuda_capability(q.device()));
#else
  (void)q;
  return false;
#endif
}

at::Tensor varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& cu_seqlens, int64_t max_length) {
  GLINT_ASSERT(varlen_attention_available(q), "varlen_attention without a kernel for ", q.scalar_type(), " on ",
               q.device());
  GLINT_ASSERT(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && q.size(1) % k.size(1) == 0);
#if GLINT_TORCH_AT_LEAST(2, 4) && defined(GLINT_CUDA)
  // Flash attention reads grouped kv heads itself; its backward is in derivatives.yaml.
  auto out = at::_flash_attention_forward(q, k, v, cu_seqlens, cu_seqlens, max_length, max_length, 0.0,
                                          /*is_causal=*/true, /*return_debug_mask=*/false);
  return std::get<0>(out);
#else
  (void)k, (void)v, (void)cu_seqlens, (void)max_length;
  return {};
#endif
}

bool grouped_mm_available(const at::Tensor& x, const at::Tensor& w) {
#if GLINT_TORCH_AT_LEAST(2, 8)
  // The kernel wants bf16 operands on a GPU it has kernels for, and 16-byte aligned rows.
  return x.is_cuda() && x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16 &&
         x.size(1) % 8 == 0 && w.size(1) % 8 == 0 &&
         grouped_mm_runs_on(cuda_capability(x.device()), TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
#else
  (void)x;
  (void)w;
  return false;
#endif
}

at::Tensor grouped_matmul(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& counts) {
  GLINT_ASSERT(x.dim() == 2 && w.dim() == 3, "grouped_matmul takes x [N, in] and w [E, out, in]");
  GLINT_ASSERT(int64_t(counts.size()) == w.size(0), counts.size(), " counts for ", w.size(0), " experts");
  GLINT_ASSERT(x.size(1) == w.size(2), "x has ", x.size(1), " columns, w takes ", w.size(2));
  GLINT_ASSERT(std::accumulate(counts.begin(), counts.end(), int64_t(0)) == x.size(0));
#if GLINT_TORCH_AT_LEAST(2, 8)
  if (grouped_mm_available(x, w)) {
    std::vector<int32_t> ends(counts.size());
    int64_t run = 0;
    for (size_t e = 0; e < counts.size(); ++e) ends[e] = int32_t(run += counts[e]);
    at::Tensor offs = at::tensor(ends, at::kInt).to(x.device(), /*non_blocking=*/true);
    return at::_grouped_mm(x, w.transpose(1, 2), offs);
  }
#endif
  return grouped_linear(x, w, counts);
}

DeviceMemory device_memory(const c10::Device& device) {
  DeviceMemory m;
#ifdef GLINT_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    m.peak_allocated_mb = double(stats.allocated_bytes[0].peak) / (1 << 20);  // [0]: all pools
    m.device_allocs = stats.num_device_alloc;
    m.device_frees = stats.num_device_free;
  }
#else
  (void)device;
#endif
  return m;
}

void reset_device_memory_peak(const c10::Device& device) {
#ifdef GLINT_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
  (void)device;
#endif
}

}  // namespace glint::compat
