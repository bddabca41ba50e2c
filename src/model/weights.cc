#include "model/weights.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/checkpoint.h"

namespace glint {

namespace {

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void check_shape(const CheckpointReader& ckpt, const std::string& key,
                 at::IntArrayRef expected) {
  GLINT_CHECK(ckpt.contains(key), ckpt.dir(), ": missing key '", key, "' (expected shape ",
              shape_str(expected), ")");
  const auto& info = ckpt.info(key);
  GLINT_CHECK(at::IntArrayRef(info.shape) == expected, ckpt.dir(), ": key '", key, "' has shape ",
              shape_str(info.shape), ", expected ", shape_str(expected));
  // Raw float8 codes read as bytes: loading them as numbers would be silently wrong.
  GLINT_CHECK(info.stored_dtype.rfind("F8_", 0) != 0, ckpt.dir(), ": key '", key, "' is stored as ",
              info.stored_dtype, ", a quantised form this model family does not read");
}

void copy_into(at::Tensor& param, const at::Tensor& value) {
  at::NoGradGuard no_grad;
  param.copy_(value);
}

// Fills experts [first, first + n) of layer l's packed tensors from either form.
void load_experts(ExpertsImpl& ex, int64_t l, const CheckpointReader& ckpt,
                  std::set<std::string>* used) {
  int64_t n = ex.num_local(), first = ex.first_expert, I = ex.intermediate();
  int64_t H = ex.gate_up_proj.size(2);
  std::string prefix = "model.layers." + std::to_string(l) + ".mlp.experts.";
  if (ckpt.contains(prefix + "gate_up_proj")) {
    std::string gu = prefix + "gate_up_proj", dn = prefix + "down_proj";
    int64_t E = ckpt.info(gu).shape.empty() ? 0 : ckpt.info(gu).shape[0];
    GLINT_CHECK(first + n <= E, ckpt.dir(), ": key '", gu, "' holds ", E,
                " experts, the model needs experts up to ", first + n);
    check_shape(ckpt, gu, {E, 2 * I, H});
    check_shape(ckpt, dn, {E, H, I});
    copy_into(ex.gate_up_proj, ckpt.read_rows(gu, first, n));
    copy_into(ex.down_proj, ckpt.read_rows(dn, first, n));
    used->insert(gu);
    used->insert(dn);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t e = first + i;
    std::string g = expert_key(l, e, "gate_proj"), u = expert_key(l, e, "up_proj"),
                d = expert_key(l, e, "down_proj");
    check_shape(ckpt, g, {I, H});
    check_shape(ckpt, u, {I, H});
    check_shape(ckpt, d, {H, I});
    at::NoGradGuard no_grad;
    ex.gate_up_proj[i].narrow(0, 0, I).copy_(ckpt.read(g));
    ex.gate_up_proj[i].narrow(0, I, I).copy_(ckpt.read(u));
    ex.down_proj[i].copy_(ckpt.read(d));
    used->insert(g);
    used->insert(u);
    used->insert(d);
  }
}

bool is_ignorable_key(const std::string& key) {
  // Buffers some exporters write; glint recomputes them.
  return key.find("rotary_emb.inv_freq") != std::string::npos;
}

}  // namespace

std::string expert_key(int64_t layer, int64_t expert, const char* proj) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) +
         "." + proj + ".weight";
}

void load_weights(CausalLMImpl& model, const CheckpointReader& ckpt, bool layers) {
  std::set<std::string> used;
  std::vector<ParameterSite> sites = parameter_sites(model);
  for (auto& site : sites) {
    if ((!layers && site.layer >= 0) || site.expert) continue;  // experts: below
    check_shape(ckpt, site.name, site.tensor.sizes());
    copy_into(site.tensor, ckpt.read(site.name));
    used.insert(site.name);
  }
  for (int64_t l = 0; l < model.config.num_hidden_layers && layers; ++l) {
    DecoderLayer layer = model.layer(l);
    if (layer->moe) load_experts(*layer->moe->experts, l, ckpt, &used);
  }
  // Layer keys the shard loader (layers == false) may read: each parameter's own name, and
  // for packed experts also the per-expert Hub keys of every expert.
  std::set<std::string> layer_keys;
  if (!layers)
    for (const auto& site : sites) {
      if (site.layer < 0) continue;
      layer_keys.insert(site.name);
      if (!site.expert) continue;
      for (int64_t e = 0; e < model.config.num_experts; ++e)
        for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
          layer_keys.insert(expert_key(site.layer, e, proj));
    }
  bool partial_experts = false;
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    if (layer->moe) partial_experts |= layer->moe->experts->num_local() != model.config.num_experts;
  }
  for (const auto& key : ckpt.keys()) {
    if (used.count(key) || is_ignorable_key(key)) continue;
    // A tied model may still carry lm_head.weight; it must equal the embedding's role.
    if (key == "lm_head.weight" && model.config.tie_word_embeddings) continue;
    if (partial_experts && key.find(".mlp.experts.") != std::string::npos) continue;
    if (layer_keys.count(key)) continue;  // read by the shard loader
    fail(ckpt.dir(), ": unexpected key '", key, "' (not a parameter of ",
         model.config.model_type, " with this config.json)");
  }
}

at::Tensor read_parameter_range(const CheckpointReader& ckpt, const ParameterSite& site,
                                at::IntArrayRef shape, int64_t start, int64_t count,
                                c10::ScalarType dtype) {
  const std::string& name = site.name;
  const std::string gu_suffix = ".mlp.experts.gate_up_proj", dn_suffix = ".mlp.experts.down_proj";
  auto ends_with = [&](const std::string& suf) {
    return name.size() > suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
  };
  bool per_expert = site.expert && !ckpt.contains(name);
  if (!per_expert) {
    check_shape(ckpt, name, shape);
    return ckpt.read_flat(name, start, count).to(dtype);
  }
  // Per-expert Hub keys: gate_up [E,2I,H] is, per expert, gate [I,H] then up [I,H];
  // down [E,H,I] is, per expert, down [H,I]. Read the runs the range covers.
  const int64_t layer = site.layer;
  const bool gate_up = ends_with(gu_suffix);
  GLINT_ASSERT(gate_up || ends_with(dn_suffix), name, " is not a packed expert tensor");
  int64_t block = gate_up ? shape[1] / 2 * shape[2] : shape[1] * shape[2];  // one key's elements
  std::vector<at::Tensor> parts;
  for (int64_t f = start; f < start + count;) {
    int64_t b = f / block, off = f % block, n = std::min(block - off, start + count - f);
    int64_t e = gate_up ? b / 2 : b;
    std::string key = gate_up ? expert_key(layer, e, b % 2 == 0 ? "gate_proj" : "up_proj")
                              : expert_key(layer, e, "down_proj");
    std::vector<int64_t> key_shape = gate_up ? std::vector<int64_t>{shape[1] / 2, shape[2]}
                                             : std::vector<int64_t>{shape[1], shape[2]};
    check_shape(ckpt, key, key_shape);
    parts.push_back(ckpt.read_flat(key, off, n).to(dtype));
    f += n;
  }
  return parts.empty() ? at::empty({0}, at::TensorOptions().dtype(dtype)) : at::cat(parts);
}

std::vector<std::pair<std::string, at::Tensor>> hub_state_dict(CausalLMImpl& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    if (name.find(".mlp.experts.") != std::string::npos) continue;
    out.emplace_back(name, item.value().detach());
  }
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    if (!layer->moe) continue;
    ExpertsImpl& ex = *layer->moe->experts;
    GLINT_ASSERT(ex.first_expert == 0 && ex.num_local() == model.config.num_experts);
    int64_t I = ex.intermediate();
    for (int64_t e = 0; e < ex.num_local(); ++e) {
      at::Tensor gu = ex.gate_up_proj[e].detach();
      out.emplace_back(expert_key(l, e, "gate_proj"), gu.narrow(0, 0, I));
      out.emplace_back(expert_key(l, e, "up_proj"), gu.narrow(0, I, I));
      out.emplace_back(expert_key(l, e, "down_proj"), ex.down_proj[e].detach());
    }
  }
  return out;
}

void save_pretrained(CausalLMImpl& model, const std::string& dir) {
  make_dirs(dir);
  nlohmann::json cfg = model.config.to_json();
  cfg["torch_dtype"] = dtype_name(model.placement.dtype);
  write_checkpoint(dir, hub_state_dict(model));
  write_text_atomic(dir + "/config.json", cfg.dump(2) + "\n");
}

}  // namespace glint

namespace glint {

CausalLM from_pretrained(const std::string& dir, const TensorPlacement& place) {
  std::string cfg_path = dir + "/config.json";
  GLINT_CHECK(path_exists(cfg_path), dir, ": no config.json (is this a Hugging Face model directory?)");
  CausalLM model(ModelConfig::from_file(cfg_path), place);
  load_weights(*model, CheckpointReader(dir));
  return model;
}

}  // namespace glint
