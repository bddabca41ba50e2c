#include "model/flops.h"

#include "model/adaptable.h"
#include "model/causal_lm.h"

namespace glint {

double forward_flops(CausalLMImpl& model, int64_t B, int64_t S) {
  const ModelConfig& c = model.config;
  double per_token = 0;
  for_each_adaptable(model, [&](const Adaptable& a) {
    double macs = double(a.in_features()) * double(a.out_features());
    per_token += a.experts ? macs * double(c.num_experts_per_tok) : macs;
  });
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    per_token += layer->self_attn->score_macs_per_token(S);
    if (layer->moe) per_token += double(layer->moe->gate->weight.numel());
  }
  per_token += double(c.hidden_size) * double(c.vocab_size);  // lm_head
  return 2.0 * double(B) * double(S) * per_token;
}

}  // namespace glint
