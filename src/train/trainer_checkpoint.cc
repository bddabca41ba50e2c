// The trainer's checkpoints: every piece of trained state this rank holds (parameters,
// AdamW moments and masters, moved router biases), the run's counters and samplers, and
// the resume that puts them back, on this mesh or another.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "dist/world.h"
#include "io/sharded_state.h"
#include "lora/peft_io.h"
#include "model/family.h"
#include "parallel/fsdp.h"
#include "train/run_checkpoint.h"
#include "train/trainer.h"

namespace glint {

namespace {

std::string to_hex(const at::Tensor& bytes) {
  at::Tensor b = bytes.contiguous().to(at::kByte);
  const uint8_t* p = b.data_ptr<uint8_t>();
  std::string out;
  out.reserve(size_t(b.numel()) * 2);
  char hex[3];
  for (int64_t i = 0; i < b.numel(); ++i) {
    std::snprintf(hex, sizeof hex, "%02x", p[i]);
    out += hex;
  }
  return out;
}

at::Tensor from_hex(const std::string& hex, const std::string& where) {
  GLINT_CHECK(hex.size() % 2 == 0, where, ": odd-length hex string");
  at::Tensor t = at::empty({int64_t(hex.size() / 2)}, at::kByte);
  uint8_t* p = t.data_ptr<uint8_t>();
  for (size_t i = 0; i < hex.size(); i += 2) {
    unsigned v = 0;
    GLINT_CHECK(std::sscanf(hex.c_str() + i, "%2x", &v) == 1, where, ": not hex at ", i);
    p[i / 2] = uint8_t(v);
  }
  return t;
}

nlohmann::json sampler_json(const EpochSampler& s, size_t samples) {
  EpochSampler::Position p = s.position();
  return {{"epoch", p.epoch}, {"drawn", p.drawn}, {"samples", samples}};
}

// Puts the sampler back where it stood, when the data still has as many samples; returns
// a report line otherwise (the order then restarts).
std::string restore_sampler(EpochSampler& s, const nlohmann::json& j, size_t samples, const std::string& what) {
  if (j.is_null()) return "";
  if (j.at("samples").get<size_t>() != samples)
    return what + ": " + std::to_string(samples) + " samples, the checkpoint's data had " +
           std::to_string(j.at("samples").get<size_t>()) + ": its order starts afresh";
  s.restore({j.at("epoch").get<int64_t>(), j.at("drawn").get<size_t>()});
  return "";
}

at::Generator device_generator(const c10::Device& d) {
  return d.is_cuda() ? at::globalContext().defaultGenerator(d) : at::detail::getDefaultCPUGenerator();
}

}  // namespace

void Trainer::add_state_pieces(std::vector<StatePiece>& pieces, const Learner& learner,
                               const std::vector<at::Tensor>& params, AdamW* opt, const std::string& prefix) {
  // Tensor i of `params` (the learner's tensor i or one shaped like it) and its optimizer
  // state, each as the pieces of the logical tensor it is (or is a shard or expert slice of).
  const bool lead = comm_->rank() == 0;
  const bool fsdp_shards = opt_.full && fsdp_runner();
  Comm* ep = ep_comm();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = learner.names[i];
    std::vector<std::pair<std::string, at::Tensor>> kinds = {{"param", params[i]}};
    if (opt) {
      kinds.emplace_back("exp_avg", opt->exp_avg()[i]);
      kinds.emplace_back("exp_avg_sq", opt->exp_avg_sq()[i]);
      if (opt->has_master(i)) kinds.emplace_back("master", opt->master(i));
    }
    for (auto& [kind, t] : kinds) {
      GLINT_ASSERT(t.is_contiguous(), "state tensor ", name, " is not contiguous");
      if (fsdp_shards) {
        for (const FsdpRunner::ShardSpan& span : fsdp_runner()->shard_spans(i))
          pieces.push_back({kind + "/" + prefix + span.name, span.full_shape, span.full_offset,
                            t.detach().reshape({-1}).narrow(0, span.shard_offset, span.count), true});
      } else if (ep && learner.expert[i]) {
        pieces.push_back(slice_piece(kind + "/" + prefix + name, t, ep->rank(), ep->size(),
                                     engine_->parallel().expert_replicas->rank() == 0));
      } else {
        pieces.push_back(replicated_piece(kind + "/" + prefix + name, t, lead));
      }
    }
  }
}

std::vector<StatePiece> Trainer::state_pieces() {
  std::vector<StatePiece> pieces;
  const bool lead = comm_->rank() == 0;
  for (const auto& l : learners())
    add_state_pieces(pieces, *l, l->params, l->optimizer.get(), bank_ ? l->name + "/" : "");
  if (opt_.optim.router_bias_update_rate > 0)
    for (auto& [name, bias] : router_biases(*model_)) pieces.push_back(replicated_piece("buffer/" + name, bias, lead));
  return pieces;
}

nlohmann::json Trainer::identity() const {
  auto lora_json = [](const LoraOptions& o) {
    return nlohmann::json{{"r", o.r},
                          {"alpha", o.alpha},
                          {"rslora", o.use_rslora},
                          {"target_modules", o.target_modules},
                          {"exclude_modules", o.exclude_modules},
                          {"target_parameters", o.target_parameters}};
  };
  nlohmann::json id = {{"model", model_->family->to_json(model_->config)},
                       {"training", opt_.full ? "full" : bank_ ? "tenants" : "lora"},
                       {"dtype", c10::toString(model_->placement.dtype)}};
  if (!opt_.full && !bank_) id["lora"] = lora_json(opt_.lora);
  if (bank_)
    for (const auto& l : learners()) id["tenants"][l->name] = lora_json(l->lora);
  if (opt_.optim.router_bias_update_rate > 0) id["router_bias_update"] = true;
  return id;
}

void Trainer::save_checkpoint_now() {
  CheckpointContent c;
  c.step = step_;
  c.identity = identity();
  c.mesh = {{"world_size", comm_->size()}, {"ep", opt_.parallel.ep}, {"ep_layout", opt_.parallel.ep_layout}, {"fsdp", opt_.parallel.fsdp}};
  c.run = {{"launch", World::from_env().launch_json()},
           {"base_model", base_model_name()},
           {"lora_dropout", opt_.lora.dropout}};
  c.state = {{"step", step_}};
  for (const auto& l : learners()) {
    nlohmann::json state = {{"optimizer_steps", l->optimizer->steps_taken()},
                            {"sampler", sampler_json(*l->sampler, l->samples.size())}};
    if (!bank_) {
      c.state.update(state);
    } else {
      state["step"] = l->step;
      c.state["tenants"][l->name] = state;
    }
  }
  c.rank_state = {{"rng_cpu", to_hex(at::detail::getDefaultCPUGenerator().get_state())}};
  if (model_->placement.device.is_cuda())
    c.rank_state["rng_device"] = to_hex(device_generator(model_->placement.device).get_state());
  c.pieces = state_pieces();
  last_checkpoint_ = save_checkpoint(*comm_, opt_.run.output, c, opt_.run.keep_last);
}

void Trainer::resume(const std::string& path) {
  CheckpointDir ckpt;
  run_collectively(*comm_, [&] { ckpt = find_checkpoint(path); });
  std::vector<std::string> diffs = identity_differences(ckpt.manifest.at("identity"), identity());
  if (!diffs.empty()) {
    std::string list;
    for (const auto& d : diffs) list += "\n  " + d;
    fail(ckpt.dir, ": this checkpoint was made for another model or training setup:", list);
  }
  verify_checkpoint(*comm_, ckpt);
  run_collectively(*comm_, [&] { read_checkpoint_pieces(ckpt, state_pieces()); });
  const nlohmann::json& st = ckpt.manifest.at("state");
  step_ = st.at("step").get<int64_t>();
  start_step_ = step_;
  // At --steps already (an interrupted run whose last step was saved, or a finished one
  // resumed with its own --steps): nothing is left to train, and run() writes the run's
  // outputs from the checkpoint.
  GLINT_USAGE_CHECK(step_ <= opt_.optim.steps, ckpt.dir, " is at step ", step_, ", past the run's --steps ", opt_.optim.steps,
                    " (a larger --steps continues it)");
  GLINT_USAGE_CHECK(opt_.run.stop_after == 0 || step_ < opt_.run.stop_after || step_ == opt_.optim.steps, ckpt.dir,
                    " is at step ", step_, ": --stop-after ", opt_.run.stop_after,
                    " is not after it (a later step, or none, continues it)");
  std::vector<std::string> notes;
  for (const auto& l : learners()) {
    if (!bank_) {
      l->step = step_;
      l->optimizer->set_steps_taken(st.at("optimizer_steps").get<int64_t>());
      notes.push_back(restore_sampler(*l->sampler, st.value("sampler", nlohmann::json()), l->samples.size(), "data"));
    } else {
      const nlohmann::json& ts = st.at("tenants").at(l->name);
      l->step = ts.at("step").get<int64_t>();
      l->optimizer->set_steps_taken(ts.at("optimizer_steps").get<int64_t>());
      notes.push_back(restore_sampler(*l->sampler, ts.at("sampler"), l->samples.size(), "tenant " + l->name));
    }
  }
  nlohmann::json mine = checkpoint_rank_state(ckpt, comm_->rank());
  if (!mine.is_null()) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(from_hex(mine.at("rng_cpu"), ckpt.dir + " rng_cpu"));
    if (model_->placement.device.is_cuda() && mine.contains("rng_device"))
      device_generator(model_->placement.device).set_state(from_hex(mine.at("rng_device"), ckpt.dir + " rng_device"));
  }
  const nlohmann::json& mesh = ckpt.manifest.at("mesh");
  std::string line = "resumed from " + ckpt.dir + " at step " + std::to_string(step_) + " (saved on " +
                     std::to_string(mesh.at("world_size").get<int>()) + " ranks";
  if (mesh.at("world_size").get<int>() != comm_->size() || mesh.at("ep").get<int64_t>() != opt_.parallel.ep ||
      mesh.at("fsdp").get<bool>() != opt_.parallel.fsdp)
    line += ", resharded onto this run's " + std::to_string(comm_->size()) + " ranks, ep " + std::to_string(opt_.parallel.ep) +
            (opt_.parallel.fsdp ? ", fsdp" : "");
  report_.push_back(line + ")");
  for (const auto& n : notes)
    if (!n.empty()) report_.push_back(n);
}

}  // namespace glint
