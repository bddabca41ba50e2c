// Reading and writing a CausalLM's weights under its family's names: every parameter, the
// checkpoint keys it comes from, and its expected shape. The routed experts, packed in the
// model, are read from either form a release may store (ModelFamily::expert_keys): packed
// (gate_up [E,2I,H], down [E,H,I]) or per expert (gate, up [I,H], down [H,I] per expert),
// and written in the form the family saves (ModelFamily::saves_packed_experts).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/causal_lm.h"

namespace glint {

class CheckpointReader;

// The checkpoint in `dir` of a model of config `c`, its keys named as the family's weight
// map reads them (ModelFamily::model_key); skipped keys are left out with one log line.
std::unique_ptr<CheckpointReader> open_checkpoint(const std::string& dir, const ModelConfig& c);

// Copies every parameter of `model` from `ckpt`, converting dtypes. Experts load only
// the model's local range [first_expert, first_expert + E_local), reading just those
// bytes. Throws glint::Error naming the key for a missing key, a shape mismatch
// (expected and actual shapes), or a checkpoint key the model does not use.
// With parameters = false only the buffers are read, and the keys checked: FSDP reads
// each rank's shard of every parameter itself (FsdpRunner, read_parameter_range), the
// embeddings and lm_head included, so that each rank reads only its share.
void load_weights(CausalLMImpl& model, const CheckpointReader& ckpt, bool parameters = true);

// Elements [start, start + count) of the flattened model parameter at `site` (packed
// expert layout holding all experts, expected `shape`), read from whichever form the
// checkpoint has, converted to `dtype`: only those bytes are read.
at::Tensor read_parameter_range(const CheckpointReader& ckpt, const ParameterSite& site,
                                at::IntArrayRef shape, int64_t start, int64_t count,
                                c10::ScalarType dtype);

// Checks, reading no tensor data, that `ckpt` holds every parameter and buffer of `model`
// (experts in either form) with the expected shape, and no key the model does not use.
// Throws glint::Error as load_weights does. REQUIRES: the model holds all experts.
void check_checkpoint(const CheckpointReader& ckpt, CausalLMImpl& model);

// How `ckpt` stores the model tensor site.name (a parameter; for a buffer only the name
// need be set): the dtype its values read as without loss, which is the stored one, or
// bfloat16 for FP8/FP4 codes with block scales (quantised: they read dequantised). A packed
// expert tensor stored per expert answers for its experts' keys.
struct StoredForm {
  c10::ScalarType dtype = c10::kFloat;
  bool quantised = false;
};
StoredForm stored_form(const CheckpointReader& ckpt, const ParameterSite& site);

// One tensor of the model's Hub form (what transformers' save_pretrained writes for the
// family, under the family's names): its key and shape, and where its values lie in the model: elements
// [offset, offset + numel) of the flattened parameter or buffer `source`. A per-expert key
// holds one expert's rows of a packed expert tensor; every other key a whole tensor.
struct HubTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::string source;   // the model's parameter or buffer name
  int64_t offset = 0;   // first element in the flattened source
  int64_t layer = -1;   // the source's decoder layer; -1: embeddings, final norm, head, buffers
  bool expert = false;  // the source is a packed routed-experts tensor [E, out, in]
  bool buffer = false;  // the source is a buffer (router state), not a parameter
  int64_t numel() const;
};

// The Hub form of `model`, in save order: parameters in named_parameters() order, a
// per-expert family's experts where its packed tensors stand (expert by expert: gate_proj,
// up_proj, down_proj), then the buffers. REQUIRES: the model holds all experts.
std::vector<HubTensor> hub_tensors(CausalLMImpl& model);

// The model's tensors under Hub names (views of hub_tensors' sources), experts split per
// expert for families that save them so. REQUIRES: the model holds all experts.
std::vector<std::pair<std::string, at::Tensor>> hub_state_dict(CausalLMImpl& model);

// The per-expert key of expert e's projection ("gate_proj", "up_proj", "down_proj") in a
// model of ModelConfig's default model_type (qwen3_moe, the tiny models' family). Another
// family's keys: family.expert_keys().per_expert.
std::string expert_key(int64_t layer, int64_t expert, const char* proj);

// Writes config.json and the weights (Hub form) of `model` into `dir`.
void save_pretrained(CausalLMImpl& model, const std::string& dir);

}  // namespace glint

namespace glint {

// Builds the model described by dir/config.json and loads its weights.
CausalLM from_pretrained(const std::string& dir, const TensorPlacement& place);

}  // namespace glint
