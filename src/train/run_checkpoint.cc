#include "train/run_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/fs.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "train/run_dir.h"

namespace glint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "glint-checkpoint";
constexpr int kVersion = 1;

std::string rank_file(int rank, const char* ext) {
  char name[64];
  std::snprintf(name, sizeof name, "rank-%05d.%s", rank, ext);
  return name;
}

// The step N of a checkpoint directory's name "step-N"; none for any other name.
std::optional<int64_t> checkpoint_step(const std::string& name) {
  if (name.rfind("step-", 0) != 0) return std::nullopt;
  char* end = nullptr;
  const long long step = std::strtoll(name.c_str() + 5, &end, 10);
  if (end == name.c_str() + 5 || *end != '\0' || step < 0) return std::nullopt;
  return step;
}

// The complete checkpoints under `root` (directories step-N holding a manifest), by step.
std::map<int64_t, std::string> complete_checkpoints(const std::string& root) {
  std::map<int64_t, std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::optional<int64_t> step = checkpoint_step(e.path().filename().string());
    if (step && path_exists(e.path().string() + "/manifest.json")) out[*step] = e.path().string();
  }
  return out;
}

void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

void diff(const nlohmann::json& a, const nlohmann::json& b, const std::string& at, std::vector<std::string>* out) {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it)
      diff(it.value(), b.contains(it.key()) ? b[it.key()] : nlohmann::json(), at.empty() ? it.key() : at + "." + it.key(),
           out);
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) diff(nlohmann::json(), it.value(), at.empty() ? it.key() : at + "." + it.key(), out);
    return;
  }
  if (a != b) out->push_back(at + ": saved " + (a.is_null() ? "(absent)" : a.dump()) + ", now " + (b.is_null() ? "(absent)" : b.dump()));
}

}  // namespace

void write_state_directory(Comm& comm, const std::string& partial, const std::string& final_dir,
                           const CheckpointContent& content) {
  const bool lead = comm.rank() == 0;
  try {
    run_collectively(comm, [&] {
      if (!lead) return;
      GLINT_CHECK(!path_exists(final_dir), final_dir, ": exists already");
      remove_quietly(partial);
      make_dirs(partial);
    });
    run_collectively(comm, [&] {
      const std::string tensors = rank_file(comm.rank(), "safetensors");
      nlohmann::json index = write_state_pieces(partial + "/" + tensors, content.pieces);
      for (auto& e : index) e["file"] = tensors;
      write_text_atomic(partial + "/" + rank_file(comm.rank(), "json"),
                        nlohmann::json{{"rank", comm.rank()}, {"pieces", index}, {"state", content.rank_state}}.dump());
    });
    run_collectively(comm, [&] {
      if (!lead) return;
      nlohmann::json files = nlohmann::json::array(), pieces = nlohmann::json::array();
      for (int r = 0; r < comm.size(); ++r) {
        for (const char* ext : {"safetensors", "json"}) {
          const std::string f = rank_file(r, ext), path = partial + "/" + f;
          files.push_back({{"name", f}, {"bytes", uint64_t(fs::file_size(path))}, {"checksum", file_checksum(path)}});
        }
        const nlohmann::json rank_index = read_json_file(partial + "/" + rank_file(r, "json"));
        for (const auto& p : rank_index.at("pieces")) pieces.push_back(p);
      }
      nlohmann::json manifest = {{"format", kFormat},       {"version", kVersion},          {"step", content.step},
                                 {"world_size", comm.size()}, {"mesh", content.mesh},       {"identity", content.identity},
                                 {"state", content.state},  {"files", files},               {"pieces", pieces}};
      if (!content.run.is_null()) manifest["run"] = content.run;
      write_text_atomic(partial + "/manifest.json", manifest.dump(1));
      std::error_code ec;
      fs::rename(partial, final_dir, ec);
      GLINT_CHECK(!ec, final_dir, ": cannot rename the finished directory into place (", ec.message(), ")");
    });
  } catch (...) {
    if (lead) remove_quietly(partial);
    throw;
  }
}

std::string save_checkpoint(Comm& comm, const std::string& run_dir, const CheckpointContent& content,
                            int64_t keep_last) {
  const bool lead = comm.rank() == 0;
  const std::string root = run_dir + "/checkpoints", name = "step-" + std::to_string(content.step);
  const std::string partial = root + "/." + name + ".partial", final_dir = root + "/" + name;
  // Rank 0 clears what an interrupted save left.
  run_collectively(comm, [&] {
    if (!lead) return;
    make_dirs(root);
    GLINT_CHECK(!path_exists(final_dir), final_dir, ": a checkpoint of this step exists already");
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string n = e.path().filename().string();
      if (n.size() > 9 && n[0] == '.' && n.compare(n.size() - 8, 8, ".partial") == 0) remove_quietly(e.path().string());
    }
  });
  write_state_directory(comm, partial, final_dir, content);
  run_collectively(comm, [&] {
    if (!lead) return;
    write_text_atomic(root + "/latest", name + "\n");
    if (keep_last > 0) {
      std::map<int64_t, std::string> all = complete_checkpoints(root);
      int64_t excess = int64_t(all.size()) - keep_last;
      for (const auto& [step, dir] : all) {
        if (excess-- <= 0) break;
        if (dir != final_dir) remove_quietly(dir);
      }
    }
  });
  return final_dir;
}

int64_t CheckpointDir::step() const { return manifest.at("step").get<int64_t>(); }

CheckpointDir find_checkpoint(const std::string& path) {
  CheckpointDir c;
  if (path_exists(path + "/manifest.json")) {
    c.dir = path;
    c.run_dir = (fs::path(path).lexically_normal() / ".." / "..").lexically_normal().string();
  } else if (path_exists(path + "/checkpoints/latest")) {
    std::string name = read_file(path + "/checkpoints/latest");
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    GLINT_CHECK(name.rfind("step-", 0) == 0 && name.find('/') == std::string::npos, path,
                "/checkpoints/latest: expected a checkpoint name (step-N), got '", name, "'");
    c.dir = path + "/checkpoints/" + name;
    c.run_dir = path;
    GLINT_CHECK(path_exists(c.dir + "/manifest.json"), path, "/checkpoints/latest names ", name,
                ", which is not a complete checkpoint (no ", c.dir, "/manifest.json)");
    // A save is complete once its directory is renamed into place; `latest` follows it.
    // A job that ended between the two leaves a newer complete checkpoint: that one.
    const std::map<int64_t, std::string> all = complete_checkpoints(path + "/checkpoints");
    const std::optional<int64_t> named = checkpoint_step(name);
    if (named && !all.empty() && all.rbegin()->first > *named) c.dir = all.rbegin()->second;
  } else if (!path_exists(path)) {
    usage_fail(path, ": no such directory");
  } else if (run_dir_unstarted(path)) {
    fail(path, ": the run there stopped before its first checkpoint, so there is nothing to continue; start it "
         "again into the same directory: glint train --config ", path, "/config.toml --output ", path);
  } else if (path_exists(path + "/checkpoints")) {
    fail(path, ": no complete checkpoint (checkpoints/latest is missing: no save finished)");
  } else if (path_exists(path + "/config.toml") || path_exists(path + "/metrics.jsonl")) {
    fail(path, ": this run saved no checkpoint (checkpoints are written by --save-every N, --stop-after N and "
         "a stop signal), so it cannot be continued");
  } else {
    fail(path, ": neither a run directory with checkpoints/ nor a checkpoint directory (no manifest.json)");
  }
  c.manifest = read_json_file(c.dir + "/manifest.json");
  const nlohmann::json& m = c.manifest;
  GLINT_CHECK(m.is_object() && m.value("format", "") == kFormat, c.dir, "/manifest.json: not a glint checkpoint manifest");
  GLINT_CHECK(m.value("version", 0) == kVersion, c.dir, "/manifest.json: version ", m.value("version", 0),
              ", this glint reads version ", kVersion);
  for (const char* key : {"step", "world_size", "files", "pieces", "state", "identity", "mesh"})
    GLINT_CHECK(m.contains(key), c.dir, "/manifest.json: no '", key, "'");
  for (const auto& f : m.at("files")) {
    const std::string p = c.dir + "/" + f.at("name").get<std::string>();
    GLINT_CHECK(path_exists(p), c.dir, ": ", f.at("name").get<std::string>(), " is missing (incomplete checkpoint)");
    uint64_t bytes = fs::file_size(p);
    GLINT_CHECK(bytes == f.at("bytes").get<uint64_t>(), p, ": ", bytes, " bytes, the manifest says ",
                f.at("bytes").get<uint64_t>(), " (truncated or replaced)");
  }
  return c;
}

void verify_checkpoint(Comm& comm, const CheckpointDir& ckpt) {
  run_collectively(comm, [&] {
    const nlohmann::json& files = ckpt.manifest.at("files");
    for (size_t i = size_t(comm.rank()); i < files.size(); i += size_t(comm.size())) {
      const std::string p = ckpt.dir + "/" + files[i].at("name").get<std::string>();
      std::string sum = file_checksum(p), want = files[i].at("checksum");
      GLINT_CHECK(sum == want, p, ": checksum ", sum, " differs from the manifest's ", want,
                  " (the file is corrupted)");
    }
  });
}

void read_checkpoint_pieces(const CheckpointDir& ckpt, const std::vector<StatePiece>& pieces) {
  read_state_pieces(ckpt.dir, ckpt.manifest.at("pieces"), pieces);
}

nlohmann::json checkpoint_rank_state(const CheckpointDir& ckpt, int rank) {
  if (rank >= ckpt.manifest.at("world_size").get<int>()) return nullptr;
  return read_json_file(ckpt.dir + "/" + rank_file(rank, "json")).at("state");
}

std::string resume_command(const CheckpointDir& ckpt, const std::string& path) {
  const nlohmann::json launch = ckpt.manifest.contains("run") ? ckpt.manifest["run"].value("launch", nlohmann::json())
                                                              : nlohmann::json();
  return launch_command_line(launch, "glint train --resume " + path);
}

std::vector<std::string> identity_differences(const nlohmann::json& saved, const nlohmann::json& now) {
  std::vector<std::string> out;
  diff(saved, now, "", &out);
  return out;
}

}  // namespace glint
