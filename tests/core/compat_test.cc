// The version seam against computations written out by hand: the expert GEMM (forward and
// both gradients, experts without tokens included), attention with grouped kv heads and
// a mask, and the CPU thread settings.
#include "core/compat.h"
#include "core/cpu_threads.h"
#include "core/error.h"
#include "core/process_settings.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

namespace glint {
namespace {

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() == 0 ? 0.0 : (a - b).abs().max().item<double>();
}

struct GroupedCase {
  std::vector<int64_t> counts;
  const char* name;
  friend void PrintTo(const GroupedCase& c, std::ostream* os) { *os << c.name; }
};

class GroupedMatmul : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(GroupedMatmul, MatchesTheLoopOverRowsWithBothGradients) {
  const std::vector<int64_t>& counts = GetParam().counts;
  const int64_t E = int64_t(counts.size()), in = 5, out = 3;
  int64_t N = 0;
  for (int64_t c : counts) N += c;
  at::manual_seed(11);
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor x = at::randn({N, in}, f64).requires_grad_(true);
  at::Tensor w = at::randn({E, out, in}, f64).requires_grad_(true);
  at::Tensor g = at::randn({N, out}, f64);  // dL/dy for L = sum(g * y)

  at::Tensor y = compat::grouped_matmul(x, w, counts);
  ASSERT_EQ(y.sizes(), (at::IntArrayRef{N, out}));
  (y * g).sum().backward();

  // By hand: row i belongs to expert e(i); y[i][j] = sum_k x[i][k] w[e][j][k];
  // dL/dx[i][k] = sum_j g[i][j] w[e][j][k]; dL/dw[e][j][k] = sum_{i of e} g[i][j] x[i][k].
  at::Tensor xd = x.detach(), wd = w.detach();
  auto X = xd.accessor<double, 2>();
  auto Wt = wd.accessor<double, 3>();
  auto G = g.accessor<double, 2>();
  at::Tensor want_y = at::zeros({N, out}, f64), want_dx = at::zeros({N, in}, f64),
             want_dw = at::zeros({E, out, in}, f64);
  auto Y = want_y.accessor<double, 2>();
  auto DX = want_dx.accessor<double, 2>();
  auto DW = want_dw.accessor<double, 3>();
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < counts[e]; ++r, ++row)
      for (int64_t j = 0; j < out; ++j)
        for (int64_t k = 0; k < in; ++k) {
          Y[row][j] += X[row][k] * Wt[e][j][k];
          DX[row][k] += G[row][j] * Wt[e][j][k];
          DW[e][j][k] += G[row][j] * X[row][k];
        }
  EXPECT_LT(max_abs_diff(y.detach(), want_y), 1e-12);
  EXPECT_LT(max_abs_diff(x.grad(), want_dx), 1e-12);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_LT(max_abs_diff(w.grad(), want_dw), 1e-12);
  // An expert without tokens gets an exactly zero gradient.
  for (int64_t e = 0; e < E; ++e)
    if (counts[e] == 0) EXPECT_EQ(w.grad()[e].abs().sum().item<double>(), 0.0) << "expert " << e;
}

INSTANTIATE_TEST_SUITE_P(Counts, GroupedMatmul,
                         ::testing::Values(GroupedCase{{3, 1, 4}, "AllBusy"}, GroupedCase{{0, 5, 0, 2}, "SomeEmpty"},
                                           GroupedCase{{0, 0, 0}, "NoTokens"}, GroupedCase{{7}, "OneExpert"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(GroupedMatmul, NoTokensStillReachesTheGraph) {
  // A rank that receives no token still runs backward through the product (expert
  // parallelism's reverse all-to-all depends on it).
  at::Tensor x = at::zeros({0, 4}, at::kDouble).requires_grad_(true);
  at::Tensor w = at::randn({2, 3, 4}, at::kDouble).requires_grad_(true);
  at::Tensor y = compat::grouped_matmul(x, w, {0, 0});
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().abs().sum().item<double>(), 0.0);
}

TEST(Attention, MatchesTheLoopWithGroupedHeadsCausalOrNot) {
  const int64_t B = 2, N = 4, Nkv = 2, S = 5, D = 3;
  at::manual_seed(5);
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor q = at::randn({B, N, S, D}, f64), k = at::randn({B, Nkv, S, D}, f64), v = at::randn({B, Nkv, S, D}, f64);
  const double inf = std::numeric_limits<double>::infinity();
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    at::Tensor mask = at::zeros({B, 1, S, S}, f64);
    auto M = mask.accessor<double, 4>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j)
          if (causal && j > i) M[b][0][i][j] = -inf;

    at::Tensor got = compat::scaled_dot_product_attention(q, k, v, causal);
    ASSERT_EQ(got.sizes(), q.sizes());
    auto Q = q.accessor<double, 4>();
    auto K = k.accessor<double, 4>();
    auto V = v.accessor<double, 4>();
    auto O = got.accessor<double, 4>();
    double worst = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < N; ++h) {
        int64_t kv = h / (N / Nkv);
        for (int64_t i = 0; i < S; ++i) {
          std::vector<double> p(S, 0.0);
          double top = -inf, total = 0;
          for (int64_t j = 0; j < S; ++j) {
            if (M[b][0][i][j] == -inf) continue;
            double s = 0;
            for (int64_t d = 0; d < D; ++d) s += Q[b][h][i][d] * K[b][kv][j][d];
            p[j] = s / std::sqrt(double(D));
            top = std::max(top, p[j]);
          }
          for (int64_t j = 0; j < S; ++j) total += M[b][0][i][j] == -inf ? 0 : (p[j] = std::exp(p[j] - top));
          for (int64_t d = 0; d < D; ++d) {
            double o = 0;
            for (int64_t j = 0; j < S; ++j)
              if (M[b][0][i][j] != -inf) o += p[j] / total * V[b][kv][j][d];
            worst = std::max(worst, std::abs(o - O[b][h][i][d]));
          }
        }
      }
    EXPECT_LT(worst, 1e-12);
  }
  // On the CPU the eager path runs on every libtorch (the same numbers on 1.13 and 2.x).
  EXPECT_FALSE(compat::fused_attention_available(q.to(at::kBFloat16)));
  EXPECT_FALSE(compat::varlen_attention_available(q.to(at::kBFloat16)));
}

// The test programs start with the settings glint-core's libraries load with (they restart
// themselves without them), and glint hands them to glint-core unless the user gave one.
TEST(ProcessSettings, ProgramsStartWithThemAndTheUsersValueStands) {
  EXPECT_TRUE(missing_process_settings().empty()) << missing_process_settings().front().first;
  // libgomp prints what it read as it loads (OMP_DISPLAY_ENV), in glint-core.
  auto r = testing::run("env -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=TRUE " + std::string(GLINT_BINARY) +
                        " init-model --help 2>&1");
  EXPECT_NE(r.output.find("OMP_WAIT_POLICY = 'PASSIVE'"), std::string::npos) << r.output;
  r = testing::run("env OMP_WAIT_POLICY=ACTIVE OMP_DISPLAY_ENV=TRUE " + std::string(GLINT_BINARY) +
                   " init-model --help 2>&1");
  EXPECT_NE(r.output.find("OMP_WAIT_POLICY = 'ACTIVE'"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("OMP_WAIT_POLICY = 'PASSIVE'"), std::string::npos) << r.output;
}

TEST(CpuThreads, SetsATenAndTheBlasPool) {
  const int before = at::get_num_threads();
  compat::set_cpu_threads(1);
  EXPECT_EQ(at::get_num_threads(), 1);
  using GetThreads = int (*)();
  if (auto get = reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads")))
    EXPECT_EQ(get(), 1) << "OpenBLAS keeps its own thread count";
  compat::set_cpu_threads(before);
  EXPECT_EQ(at::get_num_threads(), before);
}

// Without --threads a process takes OMP_NUM_THREADS when set (torchrun sets 1 per rank), else
// its share of the cores: four ranks on two cores taking two threads each ran 20x slower.
TEST(CpuThreads, TheDefaultIsTheEnvironmentsElseTheNodesCoresSharedAmongItsRanks) {
  EXPECT_EQ(cpu_threads_for(3, 4, nullptr, 2), 3);
  EXPECT_EQ(cpu_threads_for(3, 1, "1", 16), 3);
  EXPECT_EQ(cpu_threads_for(0, 8, "1", 16), 1);
  EXPECT_EQ(cpu_threads_for(0, 1, "6", 2), 6);
  EXPECT_EQ(cpu_threads_for(0, 1, "6,2", 16), 6);
  EXPECT_EQ(cpu_threads_for(0, 1, nullptr, 16), 16);
  EXPECT_EQ(cpu_threads_for(0, 4, nullptr, 16), 4);
  EXPECT_EQ(cpu_threads_for(0, 3, nullptr, 16), 5);
  EXPECT_EQ(cpu_threads_for(0, 4, nullptr, 2), 1);
  for (const char* unusable : {"", "0", "-2", "x", "4x", " "})
    EXPECT_EQ(cpu_threads_for(0, 2, unusable, 8), 4) << "OMP_NUM_THREADS=\"" << unusable << "\"";
  EXPECT_GE(available_cores(), 1);
}

// The fused kernels follow the GPU's capability as well as the libtorch: an A100 (8.0)
// must take the per-expert loop where at::_grouped_mm would throw (2.8) or run its slow
// internal loop (2.9+), and a Turing card (7.5) eager attention instead of flash.
TEST(Compat, FusedKernelsFollowTheCapability) {
  using C = compat::CudaCapability;
  EXPECT_FALSE(compat::flash_attention_runs_on(C{7, 5}));
  EXPECT_TRUE(compat::flash_attention_runs_on(C{8, 0}));
  EXPECT_TRUE(compat::flash_attention_runs_on(C{9, 0}));
  EXPECT_FALSE(compat::flash_attention_runs_on(C{}));  // not a GPU

  EXPECT_FALSE(compat::grouped_mm_runs_on(C{9, 0}, 2, 7));  // before the op existed
  EXPECT_FALSE(compat::grouped_mm_runs_on(C{9, 0}, 1, 13));
  EXPECT_TRUE(compat::grouped_mm_runs_on(C{9, 0}, 2, 8));
  EXPECT_FALSE(compat::grouped_mm_runs_on(C{8, 0}, 2, 8));
  EXPECT_FALSE(compat::grouped_mm_runs_on(C{10, 0}, 2, 8));  // 2.8: 9.x only
  EXPECT_TRUE(compat::grouped_mm_runs_on(C{9, 0}, 2, 11));
  EXPECT_TRUE(compat::grouped_mm_runs_on(C{10, 0}, 2, 11));
  EXPECT_FALSE(compat::grouped_mm_runs_on(C{8, 0}, 2, 11));
  EXPECT_FALSE(compat::grouped_mm_runs_on(C{12, 0}, 2, 14));
  EXPECT_TRUE(compat::grouped_mm_runs_on(C{9, 0}, 3, 0));
}

TEST(Compat, CapabilityOfADeviceAndItsStandIn) {
  const c10::Device cpu(c10::kCPU), gpu(c10::kCUDA, 0);
  testing::ScopedEnv capability("GLINT_CUDA_CAPABILITY", nullptr);
  EXPECT_EQ(compat::cuda_capability(cpu).major, 0);
  capability.set("8.6");
  EXPECT_EQ(compat::cuda_capability(cpu).major, 0);  // a CPU has none, stand-in or not
  const compat::CudaCapability c = compat::cuda_capability(gpu);
  EXPECT_EQ(c.major, 8);
  EXPECT_EQ(c.minor, 6);
  for (const char* bad : {"eight", "8.x", "0.0", "-9"}) {
    capability.set(bad);
    try {
      compat::cuda_capability(gpu);
      ADD_FAILURE() << bad << " was taken for a capability";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("GLINT_CUDA_CAPABILITY"), std::string::npos) << e.what();
    }
  }
  // CPU tensors never take a fused kernel, whatever the stand-in says.
  capability.set("9.0");
  auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  EXPECT_FALSE(compat::grouped_mm_available(at::zeros({8, 16}, bf16), at::zeros({2, 16, 16}, bf16)));
  EXPECT_FALSE(compat::varlen_attention_available(at::zeros({8, 2, 64}, bf16)));
}

TEST(Compat, NamesTheLibtorchVersion) {
  std::string v = compat::torch_version();
  EXPECT_TRUE(v.rfind("1.", 0) == 0 || v.rfind("2.", 0) == 0) << v;
}

}  // namespace
}  // namespace glint
