// Training checkpoints: OUT/checkpoints/step-N/, written by every rank at once and made
// visible only when complete.
//
//   step-N/rank-00000.safetensors  the state pieces rank 0 owns (io/sharded_state.h)
//   step-N/rank-00000.json         their index and that rank's own state (RNG)
//   step-N/manifest.json           the run's state (step, samplers, tenants, schedule),
//                                  the mesh, what the run trains, every file with its
//                                  size and checksum, and the index of every piece
//   latest                         "step-N", the newest complete checkpoint
//
// Writing: every rank writes into OUT/checkpoints/.step-N.partial; after all have
// finished, rank 0 writes the manifest, renames the directory to step-N, then rewrites
// `latest`, and only then deletes checkpoints beyond --keep-last. A crash at any point
// leaves `latest` naming a complete checkpoint (or none); a partial directory is never
// read and is removed by the next save.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "io/sharded_state.h"

namespace glint {

class Comm;

struct CheckpointContent {
  int64_t step = 0;
  nlohmann::json state;       // the run's state: the same on every rank (rank 0's is kept)
  nlohmann::json identity;    // what the run trains (model, adapters, tenants): a resume
                              // must match it
  nlohmann::json mesh;        // world size and parallel layout (a resume may differ)
  nlohmann::json rank_state;  // this rank's own state
  nlohmann::json run;         // how the run was started, for what continues or exports it
                              // (never compared): {"launch": World::launch_json(),
                              // "base_model": --model or the built-in base, "lora_dropout"}
  std::vector<StatePiece> pieces;
};

// Collective over `comm`: writes OUT/checkpoints/step-<step>/ and points `latest` at it;
// then removes all but the newest `keep_last` checkpoints (0: keeps all). Returns its
// directory. A failure on any rank (a full disk, say) throws glint::Error on every rank,
// leaves no step-<step> directory and the previous checkpoints as they were.
std::string save_checkpoint(Comm& comm, const std::string& run_dir, const CheckpointContent& content,
                            int64_t keep_last);

// Collective over `comm`: the mechanism under save_checkpoint, for any directory of
// saved state. Rank 0 empties `partial`; every rank writes its pieces and index there;
// rank 0 adds manifest.json and renames `partial` to `final_dir` (which must not exist).
// A failure on any rank throws on every rank and leaves no `final_dir` and no `partial`.
// find_checkpoint, verify_checkpoint and read_checkpoint_pieces read the result.
void write_state_directory(Comm& comm, const std::string& partial, const std::string& final_dir,
                           const CheckpointContent& content);

// A complete checkpoint, opened for reading.
struct CheckpointDir {
  std::string dir;          // .../checkpoints/step-N
  std::string run_dir;      // the run directory that holds it
  nlohmann::json manifest;
  int64_t step() const;
};

// `path` is a run directory (its `latest` checkpoint) or a checkpoint directory. Throws
// glint::Error naming the path when there is no complete checkpoint there, the manifest
// is unreadable, or a file it lists is missing or has another size.
CheckpointDir find_checkpoint(const std::string& path);

// Collective over `comm`: compares every file's checksum with the manifest's, the ranks
// sharing the work. Throws glint::Error on every rank naming the first file that differs.
void verify_checkpoint(Comm& comm, const CheckpointDir& ckpt);

// Fills `pieces` from the checkpoint, on any mesh (io/sharded_state.h).
void read_checkpoint_pieces(const CheckpointDir& ckpt, const std::vector<StatePiece>& pieces);

// Rank `rank`'s own state as saved, or null when the checkpoint had fewer ranks.
nlohmann::json checkpoint_rank_state(const CheckpointDir& ckpt, int rank);

// The command that continues the run from `path` (a run or checkpoint directory) as the
// job that saved `ckpt` was started: "glint launch -n 2 -- glint train --resume runs/x",
// or "glint train --resume runs/x" for one process (dist/world.h launch_command_line).
std::string resume_command(const CheckpointDir& ckpt, const std::string& path);

// The differences between two identities, "field: saved X, now Y" each; empty when equal.
std::vector<std::string> identity_differences(const nlohmann::json& saved, const nlohmann::json& now);

}  // namespace glint
