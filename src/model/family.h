// Model families: what differs between model architectures, behind one interface, and
// the registry that maps a config.json `model_type` to its family. A family lives in
// one folder, src/model/<family>/ (its config mapping, its layers, its weight names),
// and is one line in family.cc.
//
// The decoder is shared: embeddings, a stack of decoder layers, final norm, lm_head. A
// decoder layer holds one attention module and one MLP module, both chosen by the
// family for that layer (dense SwiGLU, MoE, MoE with shared experts).
//
// A family owns its names in both directions (ModelFamily::model_key, expert_keys): the
// model's parameters carry the names of the family's modules (LayerParts, its attention
// modules), and the routed experts, which glint always holds packed, are named by the
// family's ExpertKeys wherever a checkpoint, a merged model or a PEFT adapter is read or
// written (model/weights.cc, export/merge.cc, lora/peft_io.cc). A family whose release
// spells its experts otherwise (Mixtral: "block_sparse_moe.experts.E.w1") writes those
// spellings in its folder and nowhere else; model/expert_keys.h builds the keys of the
// usual "<layer>.<block>.<experts>.<E>.<projection>.weight" layout from them.
//
// Legend: B rows, S positions, H hidden, E experts, I one expert's width.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layers.h"

namespace glint {

class DecodeCache;

// What every layer of one forward shares, computed once per forward.
struct LayerContext {
  SequenceLayout layout;           // where the packed sequences lie
  std::vector<RotaryTables> rope;  // the family's RoPE tables; [0] is the main set
  at::Tensor input_ids;            // [B,S] int64 on the model's device
  // Incremental decoding (model/decode_cache.h): this forward's tokens continue the rows
  // of the cache; null in training and in whole-sequence forwards.
  DecodeCache* cache = nullptr;
};

// The attention sublayer of a decoder layer: x [B,S,H] (normed) -> [B,S,H].
class AttentionModule : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x, const LayerContext& ctx) = 0;
  // The same with ctx.cache set: x holds each row's new tokens, which attend to the
  // row's cached ones too, and join them. A module that keeps its own decoding state
  // (keys and values, a recurrent state) overrides this, keeps_decode_state() and
  // decode_state_bytes(); the default recomputes forward() over each row's whole history
  // of inputs (history_forward in model/decode_cache.h): exact, but O(history) per token.
  virtual at::Tensor forward_cached(const at::Tensor& x, const LayerContext& ctx);
  virtual bool keeps_decode_state() const { return false; }
  // Bytes of one row's decoding state once the cache holds room for `positions` positions,
  // its elements of `dtype_bytes` (the model's dtype): what forward_cached keeps. A module
  // that keeps no state of its own (the default) has its inputs kept for it, counted by
  // the estimate (train/memory_estimate.h), and returns 0.
  virtual double decode_state_bytes(int64_t positions, int64_t dtype_bytes) const;
  // Multiply-adds per token outside the projections (the score and value products) for
  // sequences of `seq_len` tokens: the FLOP count adds these to its walk of the linears.
  virtual double score_macs_per_token(int64_t seq_len) const = 0;
  // Its memory in a training step, its input x counted when backward needs it (the norm
  // before it keeps only what the norm's own backward needs).
  virtual ActivationMemory activation_memory(const ActivationShape& shape) const = 0;
};

class MoeBlockImpl;

// The feed-forward sublayer: x [B,S,H] (normed) -> [B,S,H]. A sparse block appends its
// router logits [T,E] to *router_logits when non-null.
class MlpModule : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x, const LayerContext& ctx,
                             std::vector<at::Tensor>* router_logits) = 0;
  // Its memory in a training step, its input x counted when backward needs it.
  virtual ActivationMemory activation_memory(const ActivationShape& shape) const = 0;
};

// The two sublayers a family builds for decoder layer `layer`, and the names they are
// registered under (the Hugging Face module names: "self_attn", "mlp").
struct LayerParts {
  std::string attention_name = "self_attn";
  std::shared_ptr<AttentionModule> attention;
  std::string mlp_name = "mlp";
  std::shared_ptr<MlpModule> mlp;
};

// glint's routed experts of one MoE layer are two packed tensors (model/moe.h Experts):
// gate_up_proj [E, 2I, H] (per expert its gate rows [0, I), then its up rows [I, 2I)) and
// down_proj [E, H, I]; a family's ExpertForm may store them input-major ([E, H, 2I],
// [E, I, H]) with gate and up interleaved, and add a bias to each ([E, 2I], [E, H]).
enum class PackedExpert { kGateUp, kDown, kGateUpBias, kDownBias };
// One expert's projection in the per-expert form: gate [I, H], up [I, H], down [H, I].
enum class ExpertProjection { kGate, kUp, kDown };

// The names a family's releases give glint's routed-expert tensors, in both of the forms a
// checkpoint may store them, and in a PEFT adapter. Keys are as the weight map reads them
// (after ModelFamily::model_key) and as glint writes them. Layouts are glint's: a family
// whose release stores gate and up interleaved, or with biases, needs more than names.
class ExpertKeys {
 public:
  virtual ~ExpertKeys() = default;
  // The packed tensor `t` of decoder layer `layer`: "model.layers.3.mlp.experts.gate_up_proj".
  virtual std::string packed(int64_t layer, PackedExpert t) const = 0;
  // Expert `expert`'s projection `p` in layer `layer`, per-expert form:
  // "model.layers.3.mlp.experts.7.gate_proj.weight" (its FP8 scale: + "_scale_inv").
  virtual std::string per_expert(int64_t layer, int64_t expert, ExpertProjection p) const = 0;
  // Whether `key` is a routed-expert key of any layer, in either form (or a scale of one).
  virtual bool is_expert_key(const std::string& key) const = 0;
  // The PEFT module path of layer `layer`'s experts, the prefix of the adapter's expert
  // keys: "model.layers.3.mlp.experts" (lora/peft_io.h).
  virtual std::string peft_module(int64_t layer) const = 0;
  // The adapter_config.json target_parameters entry of packed tensor `t`:
  // "mlp.experts.gate_up_proj". Its last part is the parameter's name in the PEFT module.
  virtual std::string peft_target_parameter(PackedExpert t) const = 0;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual std::string name() const = 0;                      // its folder: "qwen3"
  virtual std::vector<std::string> model_types() const = 0;  // config.json model_types it reads
  // Reads every field of config.json this family uses, each checked, the offending
  // value named; `where` names the file. Calls validate().
  virtual ModelConfig from_json(const nlohmann::json& j, const std::string& where) const = 0;
  // The config.json transformers writes for `c`.
  virtual nlohmann::json to_json(const ModelConfig& c) const = 0;
  // Throws glint::Error naming `where` and the inconsistent fields.
  virtual void validate(const ModelConfig& c, const std::string& where) const = 0;
  virtual LayerParts make_layer(const ModelConfig& c, int64_t layer, const TensorPlacement& place) const = 0;
  // The RoPE tables of one forward for position_ids [B,S], computed in `compute`.
  virtual std::vector<RotaryTables> rotary(const ModelConfig& c, const at::Tensor& position_ids,
                                           c10::ScalarType compute) const = 0;
  // A tiny model of this family (registry tests, examples): a few layers, all its parts.
  virtual ModelConfig tiny(int64_t vocab_size) const = 0;
  // The LoRA target names a user may list for this family (linear module names and
  // expert_target(parameter) for packed expert tensors, model/adaptable.h), for error
  // messages and --help.
  virtual std::vector<std::string> lora_targets() const = 0;
  // The weight map's reading of a stored checkpoint key: the model's name for it, or ""
  // for a key the family skips (vision or multi-token-prediction weights, say). The
  // default: keys are the model's names.
  virtual std::string model_key(const std::string& stored, const ModelConfig& c) const { return stored; }
  // The names of the routed experts in this family's releases (both forms) and adapters.
  // Loading reads them, save_pretrained, merging and adapter export write them.
  virtual const ExpertKeys& expert_keys() const = 0;
  // The expert form save_pretrained and merging write: packed (expert_keys().packed,
  // [E,2I,H] and [E,H,I], as the family's releases store them) or per expert
  // (expert_keys().per_expert, the Hub's older form).
  virtual bool saves_packed_experts() const { return false; }
};

// Whether a stored key names a decoder layer past the config's last, `prefix` then the
// layer's index ("model.layers.61.eh_proj.weight" with 61 layers): the releases that
// store multi-token-prediction layers after the decoder's (DeepSeek-V3, GLM-4.5) skip them.
bool beyond_last_layer(const std::string& key, const std::string& prefix, int64_t num_hidden_layers);

// Every registered family, in registry order.
const std::vector<const ModelFamily*>& model_families();
// The family reading `model_type`; throws glint::Error naming `where` and the known types.
const ModelFamily& family_for(const std::string& model_type, const std::string& where);
// The family whose folder is `name` ("qwen3"); throws glint::UsageError naming the families.
const ModelFamily& family_named(const std::string& name);

}  // namespace glint
