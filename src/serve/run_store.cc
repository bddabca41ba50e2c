#include "serve/run_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "serve/protocol.h"

namespace glint {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string iso_time(std::time_t t) {
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::time_t mtime(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mtime : 0;
}

bool hidden(const fs::path& p) { return p.filename().string().rfind('.', 0) == 0; }

}  // namespace

RunStore::RunStore(std::string state_dir) : root_(std::move(state_dir) + "/runs") {
  make_dirs(root_);
  std::error_code ec;
  for (const auto& run : fs::directory_iterator(root_, ec)) {
    for (const char* kind : {"weights", "sampler_weights"})
      for (const auto& e : fs::directory_iterator(run.path() / kind, ec))
        if (hidden(e.path())) fs::remove_all(e.path(), ec);
    fs::remove_all(run.path() / "ephemeral", ec);  // the sampling sessions they served ended with the process
    // Paged states but the one state.json names (a process stopped between writing a
    // new one and removing the old one, or while writing).
    const json st = model_state(run.path().filename().string());
    const std::string keep = st.is_object() && st.value("state", "") == "paged" ? st.value("dir", "") : "";
    for (const auto& e : fs::directory_iterator(run.path() / "paged", ec))
      if (e.path().string() != keep) fs::remove_all(e.path(), ec);
  }
}

void RunStore::write_model_state(const std::string& id, const json& state) {
  json st = state;  // a directory is kept relative to the run: the state dir may move
  const std::string prefix = run_dir(id) + "/";
  if (st.contains("dir") && st["dir"].get<std::string>().rfind(prefix, 0) == 0)
    st["dir"] = st["dir"].get<std::string>().substr(prefix.size());
  write_text_atomic(run_dir(id) + "/state.json", st.dump());
}

json RunStore::model_state(const std::string& id) const {
  const std::string path = run_dir(id) + "/state.json";
  if (!path_exists(path)) return nullptr;
  try {
    json st = read_json_file(path);
    if (!st.is_object()) return nullptr;
    if (auto d = st.find("dir"); d != st.end()) {
      if (!d->is_string() || d->get<std::string>().find("..") != std::string::npos) return nullptr;
      *d = run_dir(id) + "/" + d->get<std::string>();
    }
    return st;
  } catch (const Error&) {
    return nullptr;  // unreadable: as if absent (the model is refused, with the reason)
  } catch (const json::exception&) {
    return nullptr;
  }
}

std::string RunStore::new_paged_dir(const std::string& id, const std::string& name) const {
  make_dirs(run_dir(id) + "/paged");
  return run_dir(id) + "/paged/" + name;
}

std::string RunStore::run_dir(const std::string& id) const { return root_ + "/" + id; }

void RunStore::create_run(const std::string& id, const json& run) {
  make_dirs(run_dir(id));
  json r = run;
  r["created"] = iso_time(std::time(nullptr));
  write_text_atomic(run_dir(id) + "/run.json", r.dump(1));
}

json RunStore::owned_run(const std::string& owner, const std::string& id) const {
  try {
    tinker::check_checkpoint_name(id, "training run");
  } catch (const Error&) {
    return nullptr;
  }
  const std::string path = run_dir(id) + "/run.json";
  if (!path_exists(path)) return nullptr;
  json run = read_json_file(path);
  return run.value("owner", "") == owner ? run : json(nullptr);
}

std::vector<std::string> RunStore::runs_of(const std::string& owner) const {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::string id = e.path().filename().string();
    if (!owned_run(owner, id).is_null()) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

json RunStore::training_run(const std::string& id) const {
  json run = read_json_file(run_dir(id) + "/run.json");
  json last_training = nullptr, last_sampler = nullptr;
  for (const auto& c : checkpoints(id)) {
    json& slot = c.at("checkpoint_type") == "training" ? last_training : last_sampler;
    if (slot.is_null() || slot.at("time").get<std::string>() <= c.at("time").get<std::string>()) slot = c;
  }
  return {{"training_run_id", id},
          {"base_model", run.at("base_model")},
          {"model_owner", run.at("owner")},
          {"is_lora", true},
          {"corrupted", false},
          {"lora_rank", run.at("lora").at("r")},
          {"last_request_time", iso_time(mtime(run_dir(id)))},
          {"last_checkpoint", last_training},
          {"last_sampler_checkpoint", last_sampler},
          {"user_metadata", run.value("user_metadata", json(nullptr))}};
}

json RunStore::checkpoints(const std::string& id) const {
  json out = json::array();
  for (const std::string kind : {"weights", "sampler_weights"}) {
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(run_dir(id) + "/" + kind, ec))
      if (!hidden(e.path())) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      const Path p{id, kind, n};
      uint64_t bytes = 0;
      for (const auto& f : fs::recursive_directory_iterator(dir(p), ec))
        if (f.is_regular_file()) bytes += f.file_size();
      out.push_back({{"checkpoint_id", kind + "/" + n},
                     {"checkpoint_type", kind == "weights" ? "training" : "sampler"},
                     {"time", iso_time(mtime(dir(p)))},
                     {"tinker_path", p.tinker()},
                     {"size_bytes", bytes},
                     {"public", false},
                     {"expires_at", nullptr}});
    }
  }
  return out;
}

RunStore::Path RunStore::parse(const std::string& path) {
  const std::string prefix = "tinker://";
  GLINT_CHECK(path.rfind(prefix, 0) == 0, "path '", path, "': expected tinker://RUN/weights/NAME");
  const std::string rest = path.substr(prefix.size());
  const size_t a = rest.find('/'), b = a == std::string::npos ? a : rest.find('/', a + 1);
  GLINT_CHECK(b != std::string::npos, "path '", path, "': expected tinker://RUN/weights/NAME");
  Path p{rest.substr(0, a), rest.substr(a + 1, b - a - 1), rest.substr(b + 1)};
  GLINT_CHECK(p.kind == "weights" || p.kind == "sampler_weights", "path '", path,
              "': the kind is weights or sampler_weights, not '", p.kind, "'");
  tinker::check_checkpoint_name(p.run, "path '" + path + "'");
  tinker::check_checkpoint_name(p.name, "path '" + path + "'");
  return p;
}

std::string RunStore::dir(const Path& p) const { return run_dir(p.run) + "/" + p.kind + "/" + p.name; }

std::string RunStore::partial_of(const std::string& dir) {
  const fs::path d(dir);
  return (d.parent_path() / ("." + d.filename().string() + ".partial")).string();
}

bool RunStore::remove(const Path& p) const {
  const std::string d = dir(p);
  if (!path_exists(d)) return false;
  const std::string gone = run_dir(p.run) + "/" + p.kind + "/." + p.name + ".deleted";
  std::error_code ec;
  fs::rename(d, gone, ec);
  GLINT_CHECK(!ec, "cannot delete ", d, ": ", ec.message());
  fs::remove_all(gone, ec);
  return true;
}

}  // namespace glint
