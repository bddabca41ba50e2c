#include "export/merge.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "core/dtype.h"
#include "export/from_checkpoint.h"
#include "core/error.h"
#include "core/staged_dir.h"
#include "core/fs.h"
#include "io/model_files.h"
#include "lora/peft_io.h"
#include "model/causal_lm.h"
#include "model/weights.h"
#include "train/run_checkpoint.h"
#include "train/run_dir.h"

namespace glint {

namespace {

namespace fs = std::filesystem;

constexpr const char* kAdapterConfig = "adapter_config.json";

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

// The dtype a tensor is written in: integer tables (hash routing) as stored; floating
// tensors as stored (quantised ones dequantised: bfloat16, StoredForm), or as --dtype says.
c10::ScalarType output_dtype(const std::string& option, const StoredForm& form) {
  if (!at::isFloatingType(form.dtype)) return form.dtype;
  return option == "keep" ? form.dtype : parse_dtype(option, "--dtype");
}

// scale · B[rows] · A for rows [first, first + n) of an adapted tensor, in `dt`: rows of a
// linear's [out, in] weight, or of a packed expert tensor [E, out, in] seen as E·out rows
// (the n rows lie in one expert's slice; `out` rows per expert).  -> [n, in]
// An input-major expert tensor [E, in, out] (in_major) is E·in rows of (scale · B · A)^T:
// `out` then counts its rows per expert, and the result is [n, out].
at::Tensor delta_rows(const LoraSite& site, int64_t first, int64_t n, int64_t out, c10::ScalarType dt,
                      bool in_major = false) {
  if (site.linear) {
    const LoraLinear& l = *site.linear;
    return at::matmul(l.B.narrow(0, first, n).to(dt), l.A.to(dt)) * l.scale;  // [n,r] x [r,in]
  }
  const LoraExperts& ex = *site.experts;
  const int64_t e = first / out, row = first % out;
  GLINT_ASSERT((first + n - 1) / out == e, "rows [", first, ", ", first + n, ") span two experts");
  if (in_major)  // [n,r] x [r,out]
    return at::matmul(ex.A[e].t().narrow(0, row, n).to(dt), ex.B[e].t().to(dt)) * ex.scale;
  return at::matmul(ex.B[e].narrow(0, row, n).to(dt), ex.A[e].to(dt)) * ex.scale;  // [n,r] x [r,in]
}

// The base model parameter a LoRA site corrects.
std::string adapted_parameter(const LoraSite& site) {
  return site.module_path + (site.linear ? ".weight" : "." + site.parameter);
}

bool stores_float64(const CheckpointReader& ckpt) {
  for (const auto& key : ckpt.keys())
    if (ckpt.info(key).dtype == at::kDouble) return true;
  return false;
}

}  // namespace

void MergeOptions::validate() const {
  GLINT_USAGE_CHECK(!model_dir.empty(), "--model: a base model directory is required");
  GLINT_USAGE_CHECK(!adapter_dir.empty(), "--adapter: an adapter directory is required");
  GLINT_USAGE_CHECK(!output.empty(), "--output: an output directory is required");
  GLINT_USAGE_CHECK(dtype == "keep" || dtype == "float32" || dtype == "bfloat16" || dtype == "float16",
                    "--dtype ", dtype, ": expected keep, float32, bfloat16 or float16");
  GLINT_USAGE_CHECK(max_shard_bytes > 0, "--max-shard-size must be positive");
  GLINT_USAGE_CHECK(piece_bytes > 0, "the piece size must be positive");
}

MergeReport merge_adapter(const MergeOptions& o) {
  o.validate();
  const std::string problem = output_dir_problem(o.output, o.overwrite);
  GLINT_USAGE_CHECK(problem.empty(), problem);
  GLINT_USAGE_CHECK(!same_directory(o.output, o.model_dir) && !same_directory(o.output, o.adapter_dir), "--output ",
                    o.output, " is the --model or --adapter directory; write the merged model elsewhere");
  const bool from_checkpoint = is_checkpoint_path(o.adapter_dir);
  GLINT_USAGE_CHECK(path_exists(o.adapter_dir), "--adapter ", o.adapter_dir, ": no such directory");
  GLINT_CHECK(from_checkpoint || path_exists(o.adapter_dir + "/" + kAdapterConfig), o.adapter_dir, ": no ",
              kAdapterConfig, " (is this a PEFT adapter directory? A training run keeps its adapter in RUN/adapter, "
              "a multi-tenant run in RUN/<tenant>/adapter; a run's checkpoints, RUN or RUN/checkpoints/step-N, are "
              "taken too)");
  const std::string config_path = o.model_dir + "/config.json";
  GLINT_CHECK(path_exists(config_path), o.model_dir, ": no config.json (is this a Hugging Face model directory?)");
  MergeReport report;

  // Everything is checked before the first byte is written: the base against the model
  // its config describes, the adapter against that model.
  const ModelConfig config = ModelConfig::from_file(config_path);
  std::unique_ptr<CheckpointReader> ckpt = open_checkpoint(o.model_dir, config);
  const bool f64 = stores_float64(*ckpt);
  // A skeleton: its weights are allocated but never written, so they take no memory (in
  // bfloat16, to halve the address space it reserves). The adapters attached to it are
  // float32, float64 over a float64 base; router biases are float32 (float64) whatever it is.
  CausalLM model(config,
                 TensorPlacement{f64 ? at::kDouble : at::kBFloat16, c10::Device(c10::kCPU), /*lazy=*/true});
  check_checkpoint(*ckpt, *model);
  {
    at::NoGradGuard no_grad;
    for (auto& item : model->named_buffers()) item.value().copy_(ckpt->read(item.key()));  // router state
  }
  report.router_biases = from_checkpoint ? find_checkpoint(o.adapter_dir).manifest.at("identity").value(
                                              "router_bias_update", false)
                                        : path_exists(o.adapter_dir + "/" + kRouterBiasesFile);
  // Replaces the router biases the adapter carries.
  LoraModel lora = load_adapter_or_checkpoint(o.adapter_dir, *model, o.tenant, "--adapter");

  std::map<std::string, ParameterSite> sites;
  for (ParameterSite& s : parameter_sites(*model)) sites.emplace(s.name, s);
  std::map<std::string, const LoraSite*> adapted;
  for (const LoraSite& s : lora.sites) {
    GLINT_ASSERT(sites.count(adapted_parameter(s)), "LoRA site ", s.module_path, " corrects no parameter");
    adapted[adapted_parameter(s)] = &s;
  }
  std::map<std::string, at::Tensor> buffers;
  for (auto& item : model->named_buffers()) buffers[item.key()] = item.value();

  // The plan: every output tensor with its dtype, so the shard headers can be written first.
  const std::vector<HubTensor> hub = hub_tensors(*model);
  std::vector<TensorSpec> specs;
  std::vector<StoredForm> forms;
  for (const HubTensor& h : hub) {
    ParameterSite site;
    if (h.buffer) site.name = h.source;
    else site = sites.at(h.source);
    StoredForm form = stored_form(*ckpt, site);
    report.dequantised |= form.quantised;
    specs.push_back(TensorSpec{h.name, output_dtype(o.dtype, form), h.shape});
    forms.push_back(form);
  }

  StagedDir staging(o.output, "the merged model");
  CheckpointWriter writer(staging.dir(), specs, o.max_shard_bytes);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < hub.size(); ++i) {
    const HubTensor& h = hub[i];
    const c10::ScalarType out_dtype = specs[i].dtype;
    ++report.tensors;
    if (h.buffer) {
      writer.append(buffers.at(h.source).to(out_dtype).contiguous());
      continue;
    }
    const ParameterSite& site = sites.at(h.source);
    const at::IntArrayRef source_shape = site.tensor.sizes();
    // Rows of `in` values: a linear [out, in]; experts [E, out, in] as E·out rows.
    const int64_t in = source_shape.empty() ? 1 : source_shape.back();
    const int64_t rows_per_expert = site.expert ? source_shape[1] : 0;
    const int64_t numel = h.numel();
    GLINT_ASSERT(h.offset % in == 0 && numel % in == 0, h.name, " is not whole rows of ", h.source);
    // Corrections in float32, float64 for a float64 tensor; integer tensors as they are.
    c10::ScalarType compute = at::kFloat;
    if (!at::isFloatingType(forms[i].dtype)) compute = forms[i].dtype;
    else if (forms[i].dtype == at::kDouble || out_dtype == at::kDouble) compute = at::kDouble;
    auto it = adapted.find(h.source);
    const LoraSite* lora_site = it == adapted.end() ? nullptr : it->second;
    report.adapted += lora_site != nullptr;
    const int64_t row_bytes = in * int64_t(c10::elementSize(compute));
    const int64_t rows_per_piece = std::max<int64_t>(1, int64_t(o.piece_bytes) / std::max<int64_t>(1, row_bytes));
    for (int64_t row = h.offset / in, end = row + numel / in; row < end;) {
      int64_t n = std::min(rows_per_piece, end - row);
      if (site.expert) n = std::min(n, rows_per_expert - row % rows_per_expert);  // one expert per piece
      at::Tensor w = read_parameter_range(*ckpt, site, source_shape, row * in, n * in, compute);  // [n*in]
      if (lora_site) {
        const int64_t out = site.expert ? rows_per_expert : source_shape[0];
        w = (w.view({n, in}) + delta_rows(*lora_site, row, n, out, compute, site.in_major)).reshape({-1});
      }
      report.largest_piece_bytes = std::max<uint64_t>(report.largest_piece_bytes, uint64_t(n * row_bytes));
      writer.append(w.to(out_dtype).contiguous());
      row += n;
    }
  }
  writer.finish();
  report.files = int64_t(writer.num_files());
  report.bytes = writer.total_bytes();

  // config.json: the base's own, so fields glint does not model survive.
  nlohmann::json cfg = read_json_file(config_path);
  if (cfg.value("model_type", std::string()) != config.model_type) {
    // A multimodal release (its text fields under text_config): the merged checkpoint holds
    // the text model, under the text model's names.
    cfg = config.to_json();
    report.config_note = "config.json describes the text model (" + config.model_type + ") of the base's " +
                         read_json_file(config_path).value("model_type", std::string("?")) +
                         "; tensors the text model does not use are not written";
  }
  if (report.dequantised) cfg.erase("quantization_config");
  if (o.dtype != "keep" || report.dequantised) {
    const std::string name = o.dtype != "keep" ? o.dtype : "bfloat16";
    cfg["torch_dtype"] = name;
    if (cfg.contains("dtype")) cfg["dtype"] = name;  // transformers v5's name for it
  }
  write_text_atomic(staging.dir() + "/config.json", cfg.dump(2) + "\n");
  report.config_files = copy_tokenizer_files(o.model_dir, staging.dir());
  ckpt->check_unchanged();  // the base did not change under the merge
  staging.commit();
  return report;
}

}  // namespace glint
