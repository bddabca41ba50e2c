// The decoder-only causal LM every family shares: embeddings, decoder layers (the
// family's attention and MLP modules, model/family.h), final norm, lm_head. The residual
// is one stream [B,S,H], or with hc_mult > 0 that many hyper-connection streams
// [B,S,n,H] (model/hyper_connection.h), collapsed by "model.hc_head" before the norm. Parameter
// names equal the Hugging Face names, the routed experts in glint's packed form
// ("model.layers.0.mlp.experts.gate_up_proj"); the family names them in its checkpoints
// (ModelFamily::expert_keys).
//
// Legend: B rows, S sequence length, H hidden, V vocab, T = B*S tokens, E experts.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <string>
#include <vector>

#include "model/config.h"
#include "model/family.h"
#include "model/hyper_connection.h"
#include "model/layers.h"
#include "model/mlp.h"
#include "model/moe.h"

namespace glint {

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& c, int64_t layer, const TensorPlacement& place);
  // x [B,S,H] (or streams [B,S,n,H]) -> the same; MoE layers append their router logits
  // [T,E] when non-null.
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx, std::vector<at::Tensor>* router_logits);
  // What its forward keeps for backward (its output among it, which the next layer keeps
  // as its input): its norms', residuals' and modules'; and the most its backward holds
  // beyond that at once (a sublayer's working set, less what backward has freed by then).
  ActivationMemory activation_memory(const ActivationShape& shape) const;
  // The attention module as the family's type T (null when it is another type).
  template <typename T>
  T* attention() const { return dynamic_cast<T*>(self_attn.get()); }

  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  HyperConnection attn_hc{nullptr}, ffn_hc{nullptr};  // the residuals, when hc_mult > 0
  std::shared_ptr<AttentionModule> self_attn;  // registered under the family's name ("self_attn")
  std::shared_ptr<MlpModule> mlp;              // registered as "mlp"
  DenseMlp dense_mlp{nullptr};  // mlp, when it is the dense SwiGLU block
  MoeBlock moe{nullptr};        // mlp, when it is a sparse MoE block
};
TORCH_MODULE(DecoderLayer);

// The "model." part of the HF names.
class DecoderStackImpl : public torch::nn::Module {
 public:
  DecoderStackImpl(const ModelConfig& c, const TensorPlacement& place);
  at::Tensor embed_tokens_weight;  // [V, H] (registered as embed_tokens.weight)
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  HyperConnectionHead hc_head{nullptr};  // when hc_mult > 0
  torch::nn::Module* embed_tokens = nullptr;
};
TORCH_MODULE(DecoderStack);

// How CausalLM runs each decoder layer. The default calls the layer directly; parallel/
// installs runners that recompute layers in backward (activation checkpointing) or
// gather sharded parameters around them (FSDP), without the model knowing.
class LayerRunner {
 public:
  virtual ~LayerRunner() = default;
  // Same contract as DecoderLayerImpl::forward.
  virtual at::Tensor run(int64_t index, DecoderLayerImpl& layer, const at::Tensor& x, const LayerContext& ctx,
                         std::vector<at::Tensor>* router_logits) = 0;
};

struct ForwardOutput {
  at::Tensor hidden;                       // [B,S,H] after the final norm
  std::vector<at::Tensor> router_logits;   // per MoE layer, [T,E] float32
};

class CausalLMImpl : public torch::nn::Module {
 public:
  CausalLMImpl(const ModelConfig& c, const TensorPlacement& place);

  // input_ids, position_ids, segment_ids: [B,S] int64 (see data/sample.h Batch).
  // With a cache (model/decode_cache.h), the tokens continue its rows: each row's tokens
  // are a prefix of it (the rest segment -1), at positions cache->lengths()[b] + i; they
  // join the cache. A forward that throws leaves the cache unusable.
  ForwardOutput forward(const at::Tensor& input_ids, const at::Tensor& position_ids,
                        const at::Tensor& segment_ids, DecodeCache* cache = nullptr);
  at::Tensor logits(const at::Tensor& hidden);  // [..., H] -> [..., V]
  at::Tensor lm_head_weight() const;            // [V, H]; the embedding when tied
  DecoderLayer layer(int64_t i) const;

  ModelConfig config;
  const ModelFamily* family = nullptr;  // of config.model_type
  TensorPlacement placement;
  DecoderStack model{nullptr};
  Linear lm_head{nullptr};  // absent when tie_word_embeddings
  std::shared_ptr<LayerRunner> layer_runner;  // null: call layers directly
};
TORCH_MODULE(CausalLM);

// Every parameter of `model`, in named_parameters() order, with where it lives: its
// decoder layer (-1 for the root: embeddings, final norm, lm_head) and whether it is a
// routed-experts tensor (sliced by expert parallelism, [E_local, ...]). Found by walking
// the module tree, never by reading the name.
struct ParameterSite {
  std::string name;  // the model's name: the Hugging Face name, experts in glint's packed form
  at::Tensor tensor;
  int64_t layer = -1;
  bool expert = false;
  // For a routed-experts tensor: which packed tensor it is, and the family whose names
  // its checkpoint keys follow (ModelFamily::expert_keys).
  PackedExpert packed = PackedExpert::kGateUp;
  bool in_major = false;  // the experts' form stores it [E, in, out] (ExpertForm::in_major)
  const ModelFamily* family = nullptr;
};
std::vector<ParameterSite> parameter_sites(CausalLMImpl& model);

// Per-token cross-entropy with the causal shift: position i predicts labels[:, i+1].
// hidden [B,S,H], labels [B,S] -> [B,S-1] float32 (0 where the label is ignored).
// Only label positions are projected onto the vocabulary, chunk by chunk
// (model/chunked_loss.h): [tokens, V] logits are never held whole.
at::Tensor token_cross_entropy(CausalLMImpl& model, const at::Tensor& hidden,
                               const at::Tensor& labels);

// Parts of the training objective for one micro-batch.
struct LossParts {
  at::Tensor token_ce;  // [B,S-1] per-token cross-entropy (token_cross_entropy)
  at::Tensor ce_sum;    // scalar: sum of label-token cross-entropy (float32)
  at::Tensor aux_loss;  // scalar load-balancing loss, undefined unless output_router_logits
  at::Tensor expert_tokens;  // [L_moe, E] int64 on CPU: routed copies of non-padding tokens
                             // per expert (undefined for a dense model)
};
// `router_stats`: the load-balancing loss and the routed copies per expert too.
LossParts causal_lm_loss(CausalLMImpl& model, const at::Tensor& input_ids,
                         const at::Tensor& labels, const at::Tensor& position_ids,
                         const at::Tensor& segment_ids, bool router_stats = true);

// Aux-loss-free balancing: each MoE layer's router correction bias b (when it has one)
// moves by `rate` toward balanced load, b_e += rate * sign(mean(load) - load_e), from
// load [L_moe, E], the routed copies per expert of each MoE layer in order.
void update_router_biases(CausalLMImpl& model, const at::Tensor& load, double rate);

// The router correction biases under their Hub names (empty when the model has none).
std::vector<std::pair<std::string, at::Tensor>> router_biases(CausalLMImpl& model);

// Random init as transformers does: normal(0, initializer_range) for projections,
// embeddings, router and experts; ones for norms; zeros for biases. Deterministic in seed.
void init_weights(CausalLMImpl& model, uint64_t seed);

}  // namespace glint
