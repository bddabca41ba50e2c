// The one home of what differs between the libtorch builds glint compiles against:
// Debian 12's 1.13 (CPU), Debian 13's 2.6 (CPU, no libuv), and a pip PyTorch 2.x
// (CUDA, NCCL). Code elsewhere calls these and never tests a version itself.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace c10d {
class Store;
struct TCPStoreOptions;
}  // namespace c10d

namespace glint::compat {

// "1.13.0", "2.6.0", ...: the libtorch glint was built against.
std::string torch_version();

// Threads for CPU kernels: ATen's intra-op pool, and the BLAS's own pool where the BLAS
// keeps one (OpenBLAS built with pthreads: Debian 13's 0.3.29 otherwise runs its own
// threads against ATen's and made training 2 to 13 times slower on 2 cores).
void set_cpu_threads(int threads);

// Calls fn(ptr, bytes) for each allocation (bytes > 0) and free (bytes < 0) that ATen's
// allocators make on this thread while the returned handle lives: the allocators' memory
// reports, which the PyTorch profiler also reads (one observer on a thread at a time).
// A block allocated before the handle is reported freed with its size (CPU: when it was
// allocated while someone observed, else not at all).
std::shared_ptr<void> observe_allocations(std::function<void(void* ptr, int64_t bytes)> fn);

// A TCPStore (the rendezvous). libtorch 2.4+ serves it with libuv by default; builds
// without libuv (Debian's) take the older server instead of failing.
c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, const c10d::TCPStoreOptions& options);

// softmax(q kᵀ / sqrt(D)) v, for q [B, N, S, D] and k, v [B, N_kv, S, D] with N a multiple
// of N_kv (query head h reads kv head h / (N / N_kv)); `causal`: query i sees keys j <= i
// only. Softmax runs in float32 (float64 for float64 inputs). 2.x:
// at::scaled_dot_product_attention (flash or cuDNN kernels on CUDA); 1.13 has only the
// private form, which glint does not use.
at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        bool causal);
// Whether scaled_dot_product_attention runs a fused kernel (rather than the same math as
// the eager path) for tensors like `q`.
bool fused_attention_available(const at::Tensor& q);

// A CUDA device's compute capability (8.0 for an A100, 9.0 for an H100); {0, 0} for
// any other device. The fused kernels below depend on it as well as on the libtorch.
struct CudaCapability {
  int major = 0, minor = 0;
};
// The capability `device` reports. GLINT_CUDA_CAPABILITY="8.0" stands in for it, so that a
// newer GPU can run the paths an older one takes.
CudaCapability cuda_capability(const c10::Device& device);
// Whether flash attention's kernels run on a GPU of capability `c` (8.0 and later).
bool flash_attention_runs_on(CudaCapability c);
// Whether at::_grouped_mm runs on a GPU of capability `c` in libtorch
// `torch_major.torch_minor`: none before 2.8; in 2.8 only 9.x (it throws elsewhere); from
// 2.9 its kernels are for 9.x and 10.x (other GPUs get a slower loop inside it, which
// grouped_matmul's own loop replaces).
bool grouped_mm_runs_on(CudaCapability c, int torch_major, int torch_minor);

// Causal attention over packed sequences, for q [T, N, D] and k, v [T, N_kv, D] holding
// the sequences back to back: sequence i is tokens [cu_seqlens[i], cu_seqlens[i+1])
// (int32 on q's device), none longer than max_length. Only where
// varlen_attention_available(q): flash attention's variable-length kernel (2.4+, CUDA of
// capability 8.0+, bf16 or fp16, head_dim a multiple of 8 up to 256).
at::Tensor varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& cu_seqlens, int64_t max_length);
bool varlen_attention_available(const at::Tensor& q);

// The expert GEMM: x [N, in] holds E groups of rows, counts[e] rows for expert e in
// expert order (a count may be 0); w [E, out, in]. Returns [N, out], group e multiplied
// by w[e]ᵀ, with gradients for x and w. On CUDA with bf16, a libtorch that has
// at::_grouped_mm and a GPU it runs on (grouped_mm_runs_on), one kernel; elsewhere
// grouped_linear (core/grouped_linear.h): one GEMM per expert into its rows of the result.
at::Tensor grouped_matmul(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& counts);
// Whether grouped_matmul takes the one-kernel path for these operands.
bool grouped_mm_available(const at::Tensor& x, const at::Tensor& w);

// The device's caching-allocator statistics since the last reset (a CUDA build on a GPU;
// elsewhere all -1): peak bytes held by tensors, and how many times the allocator had
// to ask the driver for memory or give it back (a steady step asks for none).
struct DeviceMemory {
  double peak_allocated_mb = -1;
  int64_t device_allocs = -1, device_frees = -1;
};
DeviceMemory device_memory(const c10::Device& device);
void reset_device_memory_peak(const c10::Device& device);

}  // namespace glint::compat
