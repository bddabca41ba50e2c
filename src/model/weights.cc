#include "model/weights.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <map>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/model_files.h"
#include "io/quantized.h"

namespace glint {

namespace {

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The scale of a quantised weight is "<key>_scale_inv" (the released DeepSeek-V4 files'
// ".scale" is renamed to it by the family's weight map). Two forms (io/quantized.h):
//   FP8: F8_E4M3 codes, per 128x128 block a float32 scale (DeepSeek-V3, Qwen) or an E8M0
//        one (DeepSeek-V4);
//   FP4: two E2M1 codes per I8/U8 byte, [R, C/2], per 1x32 block an E8M0 scale [R, C/32]
//        (DeepSeek-V4's routed experts).
std::string fp8_scale_key(const std::string& key) { return key + "_scale_inv"; }
constexpr int64_t kFp8Block = 128;

enum class Quantised { kNo, kFp8, kFp4 };

Quantised quantised_form(const CheckpointReader& ckpt, const std::string& key) {
  const std::string& stored = ckpt.info(key).stored_dtype;
  if (!ckpt.contains(fp8_scale_key(key))) return Quantised::kNo;
  if (stored == "F8_E4M3") return Quantised::kFp8;
  if ((stored == "I8" || stored == "U8") && ckpt.info(fp8_scale_key(key)).stored_dtype == "F8_E8M0")
    return Quantised::kFp4;
  return Quantised::kNo;
}

// The weight's shape as numbers: an FP4 matrix holds two columns per stored byte.
std::vector<int64_t> logical_shape(const CheckpointReader& ckpt, const std::string& key) {
  std::vector<int64_t> shape = ckpt.info(key).shape;
  if (quantised_form(ckpt, key) == Quantised::kFp4 && shape.size() == 2) shape[1] *= 2;
  return shape;
}

void check_shape(const CheckpointReader& ckpt, const std::string& key,
                 at::IntArrayRef expected) {
  GLINT_CHECK(ckpt.contains(key), ckpt.dir(), ": missing key '", key, "' (expected shape ",
              shape_str(expected), ")");
  const auto& info = ckpt.info(key);
  const std::vector<int64_t> shape = logical_shape(ckpt, key);
  GLINT_CHECK(at::IntArrayRef(shape) == expected, ckpt.dir(), ": key '", key, "' has shape ",
              shape_str(shape), ", expected ", shape_str(expected));
  // Raw float8 codes read as bytes: loading them as numbers would be silently wrong. An
  // e4m3 matrix with its block scale is dequantised while read.
  if (info.stored_dtype.rfind("F8_", 0) != 0) return;
  GLINT_CHECK(info.stored_dtype == "F8_E4M3" && expected.size() == 2, ckpt.dir(), ": key '", key,
              "' is stored as ", info.stored_dtype, ", a quantised form this model family does not read");
  GLINT_CHECK(ckpt.contains(fp8_scale_key(key)), ckpt.dir(), ": key '", key,
              "' is stored as F8_E4M3 but its block scale '", fp8_scale_key(key), "' is missing");
}

// Rows [start, start + count) of the [R, C] weight `key` as numbers of `dtype`: quantised
// codes dequantised with their scales, anything else converted.
at::Tensor read_value_rows(const CheckpointReader& ckpt, const std::string& key, int64_t start, int64_t count,
                           c10::ScalarType dtype) {
  const std::string name = ckpt.dir() + ": key '" + key + "'", scale = fp8_scale_key(key);
  switch (quantised_form(ckpt, key)) {
    case Quantised::kNo:
      return ckpt.read_rows(key, start, count).to(dtype);
    case Quantised::kFp8:
      return dequantize_fp8_blocks(ckpt.read_rows(key, start, count), ckpt.read(scale),
                                   /*scale_is_e8m0=*/ckpt.info(scale).stored_dtype == "F8_E8M0", dtype, name,
                                   kFp8Block, start, ckpt.info(key).shape.at(0));
    case Quantised::kFp4:
      return dequantize_fp4_e2m1(ckpt.read_rows(key, start, count), ckpt.read_rows(scale, start, count), dtype, name);
  }
  GLINT_ASSERT(false);
  return {};
}

at::Tensor read_value(const CheckpointReader& ckpt, const std::string& key, c10::ScalarType dtype) {
  if (quantised_form(ckpt, key) == Quantised::kNo) return ckpt.read(key).to(dtype);
  return read_value_rows(ckpt, key, 0, ckpt.info(key).shape.at(0), dtype);
}

// Elements [start, start + count) of the flattened weight `key`.
at::Tensor read_value_flat(const CheckpointReader& ckpt, const std::string& key, int64_t start, int64_t count,
                           c10::ScalarType dtype) {
  if (quantised_form(ckpt, key) == Quantised::kNo) return ckpt.read_flat(key, start, count).to(dtype);
  if (count == 0) return at::empty({0}, at::TensorOptions().dtype(dtype));
  const int64_t C = logical_shape(ckpt, key).at(1), first = start / C, last = (start + count - 1) / C;
  return read_value_rows(ckpt, key, first, last - first + 1, dtype).reshape({-1}).narrow(0, start - first * C, count);
}

// A packed expert tensor "<key>" in MXFP4 (gpt-oss releases): "<key>_blocks" [E, out, in/32,
// 16] bytes, two E2M1 codes each (column 2k in the low nibble), and "<key>_scales" [E, out,
// in/32] E8M0 codes, one per 32 values of a row (io/quantized.h dequantize_fp4_e2m1). The
// values are [E, out, in], whatever order the model holds them in.
std::string mxfp4_blocks(const std::string& key) { return key + "_blocks"; }
std::string mxfp4_scales(const std::string& key) { return key + "_scales"; }
bool stored_mxfp4(const CheckpointReader& ckpt, const std::string& key) {
  return !ckpt.contains(key) && ckpt.contains(mxfp4_blocks(key));
}

// Checks the MXFP4 pair of `key` against values [E, out, in] (out_major).
void check_mxfp4_shape(const CheckpointReader& ckpt, const std::string& key, at::IntArrayRef out_major) {
  GLINT_CHECK(out_major.size() == 3, ckpt.dir(), ": key '", mxfp4_blocks(key), "' stands for a ",
              out_major.size(), "-D tensor; MXFP4 holds packed experts only");
  const int64_t E = out_major[0], out = out_major[1], in = out_major[2];
  GLINT_CHECK(in % 32 == 0, ckpt.dir(), ": key '", mxfp4_blocks(key), "' would hold rows of ", in,
              " values, not a multiple of MXFP4's 32");
  const std::string blocks = mxfp4_blocks(key), scales = mxfp4_scales(key);
  GLINT_CHECK(ckpt.contains(scales), ckpt.dir(), ": key '", blocks, "' has no scales '", scales, "'");
  const std::vector<int64_t> want_blocks{E, out, in / 32, 16}, want_scales{E, out, in / 32};
  GLINT_CHECK(at::IntArrayRef(ckpt.info(blocks).shape) == at::IntArrayRef(want_blocks), ckpt.dir(), ": key '", blocks,
              "' has shape ", shape_str(ckpt.info(blocks).shape), ", expected ", shape_str(want_blocks));
  GLINT_CHECK(at::IntArrayRef(ckpt.info(scales).shape) == at::IntArrayRef(want_scales), ckpt.dir(), ": key '", scales,
              "' has shape ", shape_str(ckpt.info(scales).shape), ", expected ", shape_str(want_scales));
  for (const std::string* k : {&blocks, &scales})
    GLINT_CHECK(ckpt.info(*k).stored_dtype == "U8" || ckpt.info(*k).stored_dtype == "I8", ckpt.dir(), ": key '", *k,
                "' is stored as ", ckpt.info(*k).stored_dtype, ", MXFP4 codes are U8");
}

// Experts [first, first + n) of the MXFP4 tensor `key`, values [E, out, in]: [n, out, in].
at::Tensor read_mxfp4_experts(const CheckpointReader& ckpt, const std::string& key, at::IntArrayRef out_major,
                              int64_t first, int64_t n, c10::ScalarType dtype) {
  check_mxfp4_shape(ckpt, key, out_major);
  const int64_t out = out_major[1], in = out_major[2];
  at::Tensor blocks = ckpt.read_rows(mxfp4_blocks(key), first, n).reshape({n * out, in / 2});
  at::Tensor scales = ckpt.read_rows(mxfp4_scales(key), first, n).reshape({n * out, in / 32});
  const std::string name = ckpt.dir() + ": key '" + mxfp4_blocks(key) + "' (experts " + std::to_string(first) +
                           ".." + std::to_string(first + n - 1) + ")";
  return dequantize_fp4_e2m1(blocks, scales, dtype, name).view({n, out, in});
}

// The shape of packed expert tensor `t` as [E, out, in] given the model's tensor shape.
std::vector<int64_t> out_major_shape(at::IntArrayRef shape, bool in_major) {
  std::vector<int64_t> s = shape.vec();
  if (in_major && s.size() == 3) std::swap(s[1], s[2]);
  return s;
}

void copy_into(at::Tensor& param, const at::Tensor& value) {
  at::NoGradGuard no_grad;
  param.copy_(value);
}

// Fills experts [first, first + n) of layer l's packed tensors from either form, under
// the names of the family's releases.
void load_experts(ExpertsImpl& ex, int64_t l, const ExpertKeys& names, const CheckpointReader& ckpt,
                  std::set<std::string>* used) {
  int64_t n = ex.num_local(), first = ex.first_expert, I = ex.intermediate();
  int64_t H = ex.hidden();
  const std::string gu = names.packed(l, PackedExpert::kGateUp);
  if (ckpt.contains(gu) || stored_mxfp4(ckpt, gu)) {
    const std::string& probe = ckpt.contains(gu) ? gu : mxfp4_blocks(gu);
    int64_t E = ckpt.info(probe).shape.empty() ? 0 : ckpt.info(probe).shape[0];
    GLINT_CHECK(first + n <= E, ckpt.dir(), ": key '", probe, "' holds ", E,
                " experts, the model needs experts up to ", first + n);
    for (PackedExpert t : {PackedExpert::kGateUp, PackedExpert::kDown, PackedExpert::kGateUpBias, PackedExpert::kDownBias}) {
      at::Tensor& dst = ex.packed(t);
      if (!dst.defined()) continue;
      const std::string key = names.packed(l, t);
      std::vector<int64_t> whole = dst.sizes().vec();
      whole[0] = E;
      if (stored_mxfp4(ckpt, key)) {
        at::Tensor v = read_mxfp4_experts(ckpt, key, out_major_shape(whole, ex.form.in_major), first, n,
                                          dst.scalar_type());
        copy_into(dst, ex.form.in_major ? v.transpose(1, 2) : v);
        used->insert(mxfp4_blocks(key));
        used->insert(mxfp4_scales(key));
        continue;
      }
      check_shape(ckpt, key, whole);
      copy_into(dst, ckpt.read_rows(key, first, n));
      used->insert(key);
    }
    return;
  }
  GLINT_CHECK(!ex.form.in_major && !ex.form.interleaved && !ex.form.biases, ckpt.dir(), ": no key '", gu,
              "': this family's experts are read packed only");
  for (int64_t i = 0; i < n; ++i) {
    int64_t e = first + i;
    std::string g = names.per_expert(l, e, ExpertProjection::kGate), u = names.per_expert(l, e, ExpertProjection::kUp),
                d = names.per_expert(l, e, ExpertProjection::kDown);
    check_shape(ckpt, g, {I, H});
    check_shape(ckpt, u, {I, H});
    check_shape(ckpt, d, {H, I});
    at::NoGradGuard no_grad;
    const auto dt = ex.gate_up_proj.scalar_type();
    ex.gate_up_proj[i].narrow(0, 0, I).copy_(read_value(ckpt, g, dt));
    ex.gate_up_proj[i].narrow(0, I, I).copy_(read_value(ckpt, u, dt));
    ex.down_proj[i].copy_(read_value(ckpt, d, dt));
    for (const std::string* k : {&g, &u, &d}) {
      used->insert(*k);
      used->insert(fp8_scale_key(*k));
    }
  }
}

bool is_ignorable_key(const std::string& key) {
  // Buffers some exporters write; glint recomputes them.
  return key.find("rotary_emb.inv_freq") != std::string::npos;
}

// The names the family of a routed-experts site (a packed tensor) gives it in checkpoints.
const ExpertKeys& site_expert_keys(const ParameterSite& site) {
  GLINT_ASSERT(site.expert && site.family, site.name, " is not a routed-experts site of a family's model");
  return site.family->expert_keys();
}

// The per-expert keys of expert e whose rows the routed-experts site holds (gate and up for
// gate_up, down for down), in the packed tensor's row order.
std::vector<std::string> per_expert_keys(const ParameterSite& site, int64_t e) {
  const ExpertKeys& names = site_expert_keys(site);
  if (site.packed == PackedExpert::kGateUpBias || site.packed == PackedExpert::kDownBias) return {};  // packed only
  if (site.packed == PackedExpert::kGateUp)
    return {names.per_expert(site.layer, e, ExpertProjection::kGate), names.per_expert(site.layer, e, ExpertProjection::kUp)};
  return {names.per_expert(site.layer, e, ExpertProjection::kDown)};
}

// The key a site's values are read from when the checkpoint holds it whole: a routed-experts
// tensor's packed release key, else the model's name.
std::string whole_key(const ParameterSite& site) {
  return site.expert ? site_expert_keys(site).packed(site.layer, site.packed) : site.name;
}

// Throws naming the first key of `ckpt` the model has no use for: not in `used`, not a
// buffer some exporters write, not a tied model's lm_head; with partial_experts, expert
// keys are passed over (another rank's experts).
void check_no_unexpected_keys(const CheckpointReader& ckpt, const CausalLMImpl& model,
                              const std::set<std::string>& used, bool partial_experts) {
  for (const auto& key : ckpt.keys()) {
    if (used.count(key) || is_ignorable_key(key)) continue;
    // A tied model may still carry lm_head.weight; it must equal the embedding's role.
    if (key == "lm_head.weight" && model.config.tie_word_embeddings) continue;
    if (partial_experts && model.family->expert_keys().is_expert_key(key)) continue;
    fail(ckpt.dir(), ": unexpected key '", key, "' (not a parameter of ", model.config.model_type,
         " with this config.json)");
  }
}

}  // namespace

std::unique_ptr<CheckpointReader> open_checkpoint(const std::string& dir, const ModelConfig& c) {
  auto ckpt = std::make_unique<CheckpointReader>(dir);
  const ModelFamily& family = family_for(c.model_type, dir + "/config.json");
  int64_t skipped = 0;
  ckpt->rename_keys([&](const std::string& key) {
    std::string name = family.model_key(key, c);
    skipped += name.empty();
    return name;
  });
  if (skipped > 0)
    std::cerr << "glint: " << dir << ": skipping " << skipped << " tensors " << c.model_type
              << " models do not use for text (vision, multi-token prediction)\n";
  return ckpt;
}

std::string expert_key(int64_t layer, int64_t expert, const char* proj) {
  const std::string p = proj;
  GLINT_ASSERT(p == "gate_proj" || p == "up_proj" || p == "down_proj", "expert_key: unknown projection ", p);
  const ExpertProjection projection = p == "gate_proj" ? ExpertProjection::kGate
                                      : p == "up_proj" ? ExpertProjection::kUp
                                                       : ExpertProjection::kDown;
  return family_for(ModelConfig().model_type, "expert_key").expert_keys().per_expert(layer, expert, projection);
}

void load_weights(CausalLMImpl& model, const CheckpointReader& ckpt, bool parameters) {
  std::set<std::string> used;
  std::vector<ParameterSite> sites = parameter_sites(model);
  for (auto& site : sites) {
    if (!parameters || site.expert) continue;  // experts: below
    check_shape(ckpt, site.name, site.tensor.sizes());
    copy_into(site.tensor, read_value(ckpt, site.name, site.tensor.scalar_type()));
    used.insert(site.name);
    used.insert(fp8_scale_key(site.name));
  }
  for (int64_t l = 0; l < model.config.num_hidden_layers && parameters; ++l) {
    DecoderLayer layer = model.layer(l);
    if (layer->moe) load_experts(*layer->moe->experts, l, model.family->expert_keys(), ckpt, &used);
  }
  // Buffers that are state (a router's correction bias): every rank holds them whole.
  for (auto& item : model.named_buffers()) {
    check_shape(ckpt, item.key(), item.value().sizes());
    copy_into(item.value(), ckpt.read(item.key()));
    used.insert(item.key());
  }
  // Keys the shard loader (parameters == false) may read: each parameter's own key, and
  // for packed experts also the per-expert keys of every expert.
  std::set<std::string> layer_keys;
  if (!parameters)
    for (const auto& site : sites) {
      layer_keys.insert(whole_key(site));
      layer_keys.insert(fp8_scale_key(whole_key(site)));
      if (!site.expert) continue;
      layer_keys.insert(mxfp4_blocks(whole_key(site)));
      layer_keys.insert(mxfp4_scales(whole_key(site)));
      for (int64_t e = 0; e < model.config.num_experts; ++e)
        for (const std::string& key : per_expert_keys(site, e)) {
          layer_keys.insert(key);
          layer_keys.insert(fp8_scale_key(key));
        }
    }
  bool partial_experts = false;
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    if (layer->moe) partial_experts |= layer->moe->experts->num_local() != model.config.num_experts;
  }
  used.insert(layer_keys.begin(), layer_keys.end());  // read by the shard loader
  check_no_unexpected_keys(ckpt, model, used, partial_experts);
  ckpt.check_unchanged();
}

void check_checkpoint(const CheckpointReader& ckpt, CausalLMImpl& model) {
  std::set<std::string> used;
  for (const ParameterSite& site : parameter_sites(model)) {
    const std::string key = whole_key(site);
    if (site.expert && stored_mxfp4(ckpt, key)) {
      check_mxfp4_shape(ckpt, key, out_major_shape(site.tensor.sizes(), site.in_major));
      used.insert(mxfp4_blocks(key));
      used.insert(mxfp4_scales(key));
      continue;
    }
    if (!site.expert || ckpt.contains(key) || per_expert_keys(site, 0).empty()) {
      check_shape(ckpt, key, site.tensor.sizes());
      used.insert(key);
      used.insert(fp8_scale_key(key));
      continue;
    }
    // Per-expert keys: gate_up [E,2I,H] is gate [I,H] and up [I,H] per expert; down [E,H,I] is down [H,I].
    const ExpertsImpl& ex = *model.layer(site.layer)->moe->experts;
    GLINT_ASSERT(ex.first_expert == 0 && ex.num_local() == model.config.num_experts, "check_checkpoint: ",
                 site.name, " holds a slice of the experts");
    const bool gate_up = site.packed == PackedExpert::kGateUp;
    const int64_t E = site.tensor.size(0), out = site.tensor.size(1), in = site.tensor.size(2);
    for (int64_t e = 0; e < E; ++e) {
      for (const std::string& key : per_expert_keys(site, e)) {
        check_shape(ckpt, key, {gate_up ? out / 2 : out, in});
        used.insert(key);
        used.insert(fp8_scale_key(key));
      }
    }
  }
  for (auto& item : model.named_buffers()) {
    check_shape(ckpt, item.key(), item.value().sizes());
    used.insert(item.key());
  }
  check_no_unexpected_keys(ckpt, model, used, /*partial_experts=*/false);
}

StoredForm stored_form(const CheckpointReader& ckpt, const ParameterSite& site) {
  std::string key = whole_key(site);
  if (site.expert && stored_mxfp4(ckpt, key)) return {c10::kBFloat16, true};
  if (site.expert && !ckpt.contains(key)) key = per_expert_keys(site, 0).front();
  const TensorInfo& info = ckpt.info(key);  // throws naming the key when absent
  if (quantised_form(ckpt, key) != Quantised::kNo) return {c10::kBFloat16, true};
  return {info.dtype, false};
}

at::Tensor read_parameter_range(const CheckpointReader& ckpt, const ParameterSite& site,
                                at::IntArrayRef shape, int64_t start, int64_t count,
                                c10::ScalarType dtype) {
  const std::string whole = whole_key(site);
  if (site.expert && stored_mxfp4(ckpt, whole)) {  // the experts the range covers, whole
    const int64_t per = c10::multiply_integers(shape) / shape[0];
    const int64_t e0 = start / per, e1 = count > 0 ? (start + count - 1) / per : e0;
    at::Tensor v = read_mxfp4_experts(ckpt, whole, out_major_shape(shape, site.in_major), e0, e1 - e0 + 1, dtype);
    if (site.in_major) v = v.transpose(1, 2);
    return v.contiguous().reshape({-1}).narrow(0, start - e0 * per, count);
  }
  bool per_expert = site.expert && !ckpt.contains(whole) && !per_expert_keys(site, 0).empty();
  if (!per_expert) {
    check_shape(ckpt, whole, shape);
    return read_value_flat(ckpt, whole, start, count, dtype);
  }
  // Per-expert keys: gate_up [E,2I,H] is, per expert, gate [I,H] then up [I,H];
  // down [E,H,I] is, per expert, down [H,I]. Read the runs the range covers.
  const bool gate_up = site.packed == PackedExpert::kGateUp;
  int64_t block = gate_up ? shape[1] / 2 * shape[2] : shape[1] * shape[2];  // one key's elements
  std::vector<at::Tensor> parts;
  for (int64_t f = start; f < start + count;) {
    int64_t b = f / block, off = f % block, n = std::min(block - off, start + count - f);
    int64_t e = gate_up ? b / 2 : b;
    const std::string key = per_expert_keys(site, e).at(gate_up ? b % 2 : 0);
    std::vector<int64_t> key_shape = gate_up ? std::vector<int64_t>{shape[1] / 2, shape[2]}
                                             : std::vector<int64_t>{shape[1], shape[2]};
    check_shape(ckpt, key, key_shape);
    parts.push_back(read_value_flat(ckpt, key, off, n, dtype));
    f += n;
  }
  return parts.empty() ? at::empty({0}, at::TensorOptions().dtype(dtype)) : at::cat(parts);
}

int64_t HubTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<HubTensor> hub_tensors(CausalLMImpl& model) {
  std::vector<HubTensor> out;
  const bool per_expert = !model.family->saves_packed_experts();
  const std::vector<ParameterSite> sites = parameter_sites(model);
  for (const ParameterSite& site : sites) {
    if (!(per_expert && site.expert)) {  // the model's layout, under the family's key
      out.push_back(HubTensor{whole_key(site), site.tensor.sizes().vec(), site.name, 0, site.layer, site.expert, false});
      continue;
    }
    // Per expert: written where gate_up_proj stands, each expert's gate, up and down.
    const ExpertsImpl& ex = *model.layer(site.layer)->moe->experts;
    GLINT_ASSERT(!ex.form.in_major && !ex.form.biases && !ex.form.interleaved, "hub_tensors: ", site.name,
                 ": experts of this form are saved packed only");
    if (site.packed != PackedExpert::kGateUp) continue;
    GLINT_ASSERT(ex.first_expert == 0 && ex.num_local() == model.config.num_experts, "hub_tensors: ", site.name,
                 " holds a slice of the experts");
    const ParameterSite* down = nullptr;
    for (const ParameterSite& s : sites)
      if (s.tensor.is_same(ex.down_proj)) down = &s;
    GLINT_ASSERT(down, "hub_tensors: no down_proj beside ", site.name);
    const int64_t l = site.layer, I = ex.intermediate(), H = ex.hidden();
    for (int64_t e = 0; e < ex.num_local(); ++e) {
      const std::vector<std::string> gate_up = per_expert_keys(site, e);
      out.push_back(HubTensor{gate_up[0], {I, H}, site.name, e * 2 * I * H, l, true, false});
      out.push_back(HubTensor{gate_up[1], {I, H}, site.name, e * 2 * I * H + I * H, l, true, false});
      out.push_back(HubTensor{per_expert_keys(*down, e)[0], {H, I}, down->name, e * H * I, l, true, false});
    }
  }
  for (auto& item : model.named_buffers())
    out.push_back(HubTensor{item.key(), item.value().sizes().vec(), item.key(), 0, -1, false, true});
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> hub_state_dict(CausalLMImpl& model) {
  std::map<std::string, at::Tensor> sources;
  for (auto& item : model.named_parameters()) sources[item.key()] = item.value().detach();
  for (auto& item : model.named_buffers()) sources[item.key()] = item.value().detach();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const HubTensor& h : hub_tensors(model)) {
    const at::Tensor& src = sources.at(h.source);
    if (h.offset == 0 && h.numel() == src.numel()) out.emplace_back(h.name, src);
    else out.emplace_back(h.name, src.reshape({-1}).narrow(0, h.offset, h.numel()).view(h.shape));
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
  load_weights(*model, *open_checkpoint(dir, model->config));
  return model;
}

}  // namespace glint
