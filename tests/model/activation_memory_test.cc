// What each decoder layer keeps from its forward for backward, measured through the
// allocators' memory reports, against what its modules say they keep
// (DecoderLayerImpl::activation_memory, the memory estimate's per-layer term), for every
// family's tiny model, under LoRA and full training.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/compat.h"
#include "lora/lora.h"
#include "model/causal_lm.h"
#include "model/family.h"
#include "model/weights.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF32;

// Runs each layer directly and records the bytes its forward left allocated (its output
// among them: the next layer keeps it as its input).
class MeasuringRunner : public LayerRunner {
 public:
  explicit MeasuringRunner(const int64_t* live) : live_(live) {}
  at::Tensor run(int64_t index, DecoderLayerImpl& layer, const at::Tensor& x, const LayerContext& ctx,
                 std::vector<at::Tensor>* router_logits) override {
    const int64_t before = *live_;
    at::Tensor y;
    // The layer's own steps, each part's keeping seen apart: a norm's output counts for
    // the module reading it when that module keeps it.
    Parts p;
    auto norm_then = [&](RMSNorm& norm, const at::Tensor& in, auto module, double* norm_kept, double* kept) {
      const int64_t start = *live_;
      at::Tensor normed = norm->forward(in);
      const int64_t normed_bytes = normed.numel() * normed.element_size();
      *norm_kept = double(*live_ - start - normed_bytes);
      const int64_t mid = *live_ - normed_bytes;
      at::Tensor out = module(normed);
      normed.reset();
      *kept = double(*live_ - mid - out.numel() * out.element_size());
      return out;
    };
    auto attention = [&](const at::Tensor& in) {
      return norm_then(layer.input_layernorm, in, [&](const at::Tensor& n) { return layer.self_attn->forward(n, ctx); },
                       &p.norm1, &p.attention);
    };
    auto mlp = [&](const at::Tensor& in) {
      return norm_then(layer.post_attention_layernorm, in,
                       [&](const at::Tensor& n) { return layer.mlp->forward(n, ctx, router_logits); }, &p.norm2, &p.mlp);
    };
    if (layer.attn_hc) {
      y = layer.ffn_hc->forward(layer.attn_hc->forward(x, attention), mlp);
    } else {
      at::Tensor h = x + attention(x);
      y = h + mlp(h);
    }
    parts.resize(size_t(index) + 1);
    parts[size_t(index)] = p;
    kept.resize(size_t(index) + 1);
    kept[size_t(index)] = *live_ - before;
    return y;
  }
  struct Parts {
    double norm1 = 0, attention = 0, norm2 = 0, mlp = 0;
  };
  std::vector<Parts> parts;  // bytes, by layer
  std::vector<int64_t> kept;  // bytes, by layer

 private:
  const int64_t* live_;
};

struct Mode {
  const char* name;
  bool lora;
  c10::ScalarType dtype = at::kFloat;
};

class LayerMemory : public ::testing::TestWithParam<const ModelFamily*> {};

TEST_P(LayerMemory, EachLayerKeepsWhatItsModulesSay) {
  const ModelFamily& f = *GetParam();
  const ModelConfig c = f.tiny(64);
  const int64_t rows = 2, S = 96;
  for (Mode mode : {Mode{"full", false}, Mode{"lora", true}, Mode{"float64 lora", true, at::kDouble}}) {
    SCOPED_TRACE(mode.name);
    CausalLM m(c, TensorPlacement{mode.dtype, c10::Device(c10::kCPU)});
    init_weights(*m, 1);
    LoraModel lora;
    if (mode.lora) {
      LoraOptions o;
      LoraOptions::parse_targets("all", "t", &o);
      o.r = 4;
      lora = apply_lora(*m, o, 2);
    }
    int64_t live = 0;
    auto runner = std::make_shared<MeasuringRunner>(&live);
    m->layer_runner = runner;
    at::Tensor ids = at::randint(0, 64, {rows, S}, at::kLong);
    ActivationShape shape;
    shape.rows = rows;
    shape.seq_len = S;
    shape.dtype_bytes = int64_t(c10::elementSize(mode.dtype));
    {
      auto observing = compat::observe_allocations([&](void*, int64_t bytes) { live += bytes; });
      at::Tensor pos = at::arange(S, at::kLong).repeat({rows, 1});
      ForwardOutput out = m->forward(ids, pos, at::zeros_like(ids));
    }
    ASSERT_EQ(runner->kept.size(), size_t(c.num_hidden_layers));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      DecoderLayer layer = m->layer(l);
      const auto& p = runner->parts[size_t(l)];
      // The formulas follow libtorch 1.13's saved tensors step by step: there each module
      // within 1% (Gated DeltaNet's chunked rule, DeepSeek-V4's blocked attention: 10%).
      // libtorch 2.x saves less in places (its fused CPU attention among them): there the
      // modules and layers are held to the estimate's own bound, 0.8-1.3x.
      const bool exact = compat::torch_version().rfind("1.", 0) == 0;
      const bool approximate = f.name() == "deepseek_v4" || (f.name().rfind("qwen3_", 0) == 0 && l == 0);
      auto within = [&](double ratio, double tol, const char* what) {
        if (exact) EXPECT_NEAR(ratio, 1.0, tol) << what;
        else EXPECT_TRUE(ratio >= 0.8 && ratio <= 1.3) << what << ": " << ratio;
      };
      within(layer->self_attn->activation_memory(shape).saved / p.attention, approximate ? 0.1 : 0.01, "attention");
      within(layer->mlp->activation_memory(shape).saved / p.mlp, f.name() == "deepseek_v4" ? 0.03 : 0.01, "mlp");
      // The whole layer, its norms and residuals (or hyper-connections) with them. Layer 0
      // under LoRA keeps less than said: its input (the frozen embedding) needs no gradient,
      // so its first norm keeps nothing.
      const double measured = double(runner->kept[size_t(l)]), said = layer->activation_memory(shape).saved;
      EXPECT_GT(said / measured, exact ? 0.9 : 0.8) << said << " vs " << measured << " bytes";
      EXPECT_LT(said / measured, exact ? 1.1 : 1.3) << said << " vs " << measured << " bytes";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, LayerMemory, ::testing::ValuesIn(model_families()),
                         [](const auto& info) { return info.param->name(); });

}  // namespace
}  // namespace glint
