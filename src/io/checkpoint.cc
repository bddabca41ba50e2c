#include "io/checkpoint.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "core/error.h"
#include "core/fs.h"

namespace glint {

namespace {
constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";
}  // namespace

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  std::string index_path = dir + "/" + kIndex, single = dir + "/" + kSingle;
  if (path_exists(index_path)) {
    nlohmann::json j = read_json_file(index_path);
    GLINT_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                index_path, ": expected an object with a \"weight_map\" object");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      GLINT_CHECK(it.value().is_string(), index_path, ": weight_map entry '", it.key(),
                  "' must name a file");
      std::string file = it.value().get<std::string>();
      GLINT_CHECK(file.find('/') == std::string::npos, index_path, ": weight_map entry '", it.key(),
                  "' names a file outside the directory: ", file);
      GLINT_CHECK(path_exists(dir + "/" + file), index_path, ": shard '", file, "' (for key '",
                  it.key(), "') does not exist");
      key_to_file_[it.key()] = file;
    }
  } else if (path_exists(single)) {
    auto f = std::make_unique<SafetensorsFile>(single);
    for (const auto& k : f->keys()) key_to_file_[k] = kSingle;
    files_[kSingle] = std::move(f);
  } else {
    fail(dir, ": no ", kSingle, " or ", kIndex, " (is this a Hugging Face model directory?)");
  }
}

std::vector<std::string> CheckpointReader::keys() const {
  std::vector<std::string> out;
  for (const auto& kv : key_to_file_) out.push_back(kv.first);
  return out;
}

bool CheckpointReader::contains(const std::string& key) const { return key_to_file_.count(key) > 0; }

const SafetensorsFile& CheckpointReader::file_for(const std::string& key) const {
  auto it = key_to_file_.find(key);
  GLINT_CHECK(it != key_to_file_.end(), dir_, ": no tensor named '", key, "'");
  auto& f = files_[it->second];
  if (!f) f = std::make_unique<SafetensorsFile>(dir_ + "/" + it->second);
  GLINT_CHECK(f->contains(key), f->path(), ": the index promises key '", key,
              "' but the shard does not hold it");
  return *f;
}

const TensorInfo& CheckpointReader::info(const std::string& key) const {
  return file_for(key).info(key);
}

at::Tensor CheckpointReader::read(const std::string& key) const { return file_for(key).read(key); }

at::Tensor CheckpointReader::read_rows(const std::string& key, int64_t start, int64_t count) const {
  return file_for(key).read_rows(key, start, count);
}

void write_checkpoint(const std::string& dir,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      uint64_t max_shard_bytes) {
  make_dirs(dir);
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const auto& kv : tensors) {
    uint64_t b = uint64_t(kv.second.numel()) * kv.second.element_size();
    if (!shards.back().empty() && shard_bytes + b > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(kv);
    shard_bytes += b;
    total += b;
  }
  if (shards.size() == 1) {
    write_safetensors(dir + "/" + kSingle, tensors, {{"format", "pt"}});
    std::remove((dir + "/" + kIndex).c_str());  // a stale index would shadow the new file
    return;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  char name[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors(dir + "/" + name, shards[i], {{"format", "pt"}});
    for (const auto& kv : shards[i]) weight_map[kv.first] = name;
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_text_atomic(dir + "/" + kIndex, index.dump(2) + "\n");
}

}  // namespace glint
