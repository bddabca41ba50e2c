// The service's training runs and checkpoints on disk, under --state-dir:
//
//   runs/<model_id>/run.json                 owner, base model, LoRA settings, seed
//   runs/<model_id>/weights/<name>/          a tenant state (train/run_checkpoint.h form)
//   runs/<model_id>/sampler_weights/<name>/  a PEFT adapter
//   runs/<model_id>/ephemeral/<n>/           adapters saved only to sample from (unlisted)
//   runs/<model_id>/paged/<name>/            a model's whole state while it holds no slot
//   runs/<model_id>/state.json               where the model's state is (model_state)
//
// A checkpoint is written under the hidden name ".<name>.partial" beside its final one
// and renamed when whole; opening the store removes hidden leftovers of a crash, so every
// listed checkpoint is complete. tinker://<model_id>/<kind>/<name> names a checkpoint.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace glint {

class RunStore {
 public:
  explicit RunStore(std::string state_dir);

  std::string run_dir(const std::string& id) const;
  void create_run(const std::string& id, const nlohmann::json& run);  // run.json, atomically
  // run.json of `id` when it exists and `owner` owns it, else null.
  nlohmann::json owned_run(const std::string& owner, const std::string& id) const;
  std::vector<std::string> runs_of(const std::string& owner) const;  // sorted
  // Where a model's state is, for this process and a later one (state.json, atomically):
  //   {"state": "fresh"}                      never changed: recreated from its seed
  //   {"state": "training", "step"}           in a slot, changed since it was last paged
  //                                           out: lost if the process dies
  //   {"state": "paged", "dir", "step", "next_seq"}  whole, in dir
  //   {"state": "unloaded"}
  // model_state is null when there is none (or it cannot be read).
  void write_model_state(const std::string& id, const nlohmann::json& state);
  nlohmann::json model_state(const std::string& id) const;
  // A directory to page model `id` out into (its parent made).
  std::string new_paged_dir(const std::string& id, const std::string& name) const;
  // The Tinker API's TrainingRun and Checkpoint objects.
  nlohmann::json training_run(const std::string& id) const;
  nlohmann::json checkpoints(const std::string& id) const;

  struct Path {
    std::string run, kind, name;  // kind: weights or sampler_weights
    std::string tinker() const { return "tinker://" + run + "/" + kind + "/" + name; }
  };
  // Parses tinker://RUN/KIND/NAME. Throws glint::Error naming the path when it is not of
  // that form, the kind is unknown, or a part is not a safe name.
  static Path parse(const std::string& tinker_path);
  std::string dir(const Path& p) const;
  // The hidden directory a checkpoint is written into before its rename to `dir`.
  static std::string partial_of(const std::string& dir);
  // Removes a checkpoint (renamed away first, so it is never seen half-deleted); false
  // when there is none.
  bool remove(const Path& p) const;

 private:
  std::string root_;  // <state_dir>/runs
};

}  // namespace glint
