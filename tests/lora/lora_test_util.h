// Shared fixtures of the LoRA and PEFT tests.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include "lora/lora.h"
#include "model/causal_lm.h"

namespace glint::testing {

// Layer 0: MoE with E=3 experts of width I=5; layer 1: dense (width 10). H=8.
inline ModelConfig lora_test_config() {
  ModelConfig c = tiny_moe_config(21);
  c.hidden_size = 8;
  c.intermediate_size = 10;
  c.moe_intermediate_size = 5;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.num_experts = 3;
  c.num_experts_per_tok = 2;
  c.mlp_only_layers = {1};
  c.initializer_range = 0.3;
  return c;
}

// Logits of a fixed batch of two rows of four tokens (ids < 21).
inline at::Tensor logits_of(CausalLMImpl& m) {
  at::Tensor ids = at::tensor({1, 4, 9, 16, 20, 0, 7, 3}, at::kLong).view({2, 4});
  at::Tensor pos = at::arange(4, at::kLong).repeat({2, 1}), seg = at::zeros({2, 4}, at::kLong);
  at::NoGradGuard ng;
  return m.logits(m.forward(ids, pos, seg).hidden);
}

// Same sites in the same order with bit-identical A and B.
inline void expect_same_adapters(LoraModel& want, LoraModel& got) {
  auto a = want.named_parameters(), b = got.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

}  // namespace glint::testing
