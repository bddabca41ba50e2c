#include "io/model_files.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/fs.h"

namespace glint {

namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

std::string shard_name(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

// "model-DDDDD-of-DDDDD.safetensors" (checked by hand: <regex> is slow to compile).
bool is_shard_name(const std::string& name) {
  const std::string pattern = "model-#####-of-#####.safetensors";
  if (name.size() != pattern.size()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (pattern[i] == '#' ? !std::isdigit(static_cast<unsigned char>(name[i]))
                          : name[i] != pattern[i])
      return false;
  return true;
}

// Removes checkpoint files in `dir` that an earlier write left and the new one does not
// use. Only names this writer produces are touched.
void remove_stale_files(const std::string& dir, const std::set<std::string>& keep) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    bool ours = name == kSingle || name == kIndex || is_shard_name(name);
    if (ours && !keep.count(name)) std::filesystem::remove(e.path(), ec);
  }
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  std::string index_path = dir + "/" + kIndex, single = dir + "/" + kSingle;
  GLINT_CHECK(path_exists(dir), dir, ": checkpoint directory does not exist (expected ", kSingle,
              " or ", kIndex, " in it)");
  // The index wins when both exist: it is what a sharded write produced last, and a
  // stale single file beside it would otherwise shadow the shards.
  if (path_exists(index_path)) {
    nlohmann::json j = read_json_file(index_path);
    GLINT_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                index_path, ": expected an object with a \"weight_map\" object");
    GLINT_CHECK(!j.contains("metadata") || j["metadata"].is_object(), index_path,
                ": \"metadata\" must be an object");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      GLINT_CHECK(it.value().is_string(), index_path, ": weight_map entry '", it.key(),
                  "' must name a file, got ", it.value().dump());
      std::string file = it.value().get<std::string>();
      // Shards live beside the index; a path would let an index read arbitrary files.
      GLINT_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." &&
                      file != "..",
                  index_path, ": weight_map entry '", it.key(),
                  "' names a file outside the directory: '", file, "'");
      GLINT_CHECK(path_exists(dir + "/" + file), index_path, ": shard '", file, "' (for key '",
                  it.key(), "') does not exist in ", dir);
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
  if (renamed_)
    for (const auto& kv : renamed_to_stored_) out.push_back(kv.first);
  else
    for (const auto& kv : key_to_file_) out.push_back(kv.first);
  return out;
}

bool CheckpointReader::contains(const std::string& key) const {
  return renamed_ ? renamed_to_stored_.count(key) > 0 : key_to_file_.count(key) > 0;
}

void CheckpointReader::rename_keys(const std::function<std::string(const std::string&)>& name) {
  std::map<std::string, std::string> out;
  for (const auto& [key, file] : key_to_file_) {
    (void)file;
    std::string seen = name(key);
    if (seen.empty()) continue;
    auto [it, fresh] = out.emplace(seen, key);
    GLINT_CHECK(fresh, dir_, ": keys '", it->second, "' and '", key, "' both name the tensor '", seen, "'");
  }
  renamed_ = true;
  renamed_to_stored_ = std::move(out);
}

const std::string& CheckpointReader::stored(const std::string& key) const {
  if (!renamed_) return key;
  auto it = renamed_to_stored_.find(key);
  GLINT_CHECK(it != renamed_to_stored_.end(), dir_, ": no tensor named '", key, "' in the checkpoint");
  return it->second;
}

const SafetensorsFile& CheckpointReader::file_for(const std::string& stored_key) const {
  const std::string& key = stored_key;
  auto it = key_to_file_.find(key);
  GLINT_CHECK(it != key_to_file_.end(), dir_, ": no tensor named '", key, "' in the checkpoint");
  auto& f = files_[it->second];
  if (!f) {
    // Validate the whole shard against the index once, when it is first opened, so the
    // error comes before any tensor of a broken shard is used.
    auto opened = std::make_unique<SafetensorsFile>(dir_ + "/" + it->second);
    for (const auto& [k, file] : key_to_file_)
      GLINT_CHECK(file != it->second || opened->contains(k), opened->path(),
                  ": the index promises key '", k, "' but the shard does not hold it");
    f = std::move(opened);
  }
  return *f;
}

const TensorInfo& CheckpointReader::info(const std::string& key) const {
  const std::string& k = stored(key);
  return file_for(k).info(k);
}

at::Tensor CheckpointReader::read(const std::string& key) const {
  const std::string& k = stored(key);
  at::Tensor t = file_for(k).read(k);
  bytes_read_ += t.nbytes();
  return t;
}

at::Tensor CheckpointReader::read_rows(const std::string& key, int64_t start,
                                       int64_t count) const {
  const std::string& k = stored(key);
  at::Tensor t = file_for(k).read_rows(k, start, count);
  bytes_read_ += t.nbytes();
  return t;
}

at::Tensor CheckpointReader::read_flat(const std::string& key, int64_t start,
                                       int64_t count) const {
  const std::string& k = stored(key);
  at::Tensor t = file_for(k).read_flat(k, start, count);
  bytes_read_ += t.nbytes();
  return t;
}

void CheckpointReader::check_unchanged() const {
  for (const auto& kv : files_)
    if (kv.second) kv.second->check_unchanged();
}

uint64_t CheckpointReader::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& kv : key_to_file_) {
    const TensorInfo& ti = file_for(kv.first).info(kv.first);
    n += ti.end - ti.begin;
  }
  return n;
}

CheckpointWriter::CheckpointWriter(const std::string& dir, std::vector<TensorSpec> tensors,
                                   uint64_t max_shard_bytes)
    : dir_(dir), tensors_(std::move(tensors)) {
  // Greedy packing in the given order: a shard closes when the next tensor would push it
  // past the limit. A lone tensor larger than the limit fills a shard by itself.
  shards_.emplace_back();
  std::set<std::string> seen;
  uint64_t shard_bytes = 0;
  for (const TensorSpec& t : tensors_) {
    GLINT_CHECK(seen.insert(t.name).second, dir, ": duplicate tensor name '", t.name, "'");
    try {
      safetensors_dtype_name(t.dtype);
    } catch (const Error&) {
      fail(dir, ": tensor '", t.name, "' has dtype ", c10::toString(t.dtype), ", which safetensors cannot store");
    }
    const uint64_t b = t.bytes();
    if (!shards_.back().empty() && shard_bytes + b > max_shard_bytes) {
      shards_.emplace_back();
      shard_bytes = 0;
    }
    shards_.back().push_back(t);
    shard_of_.push_back(shards_.size() - 1);
    shard_bytes += b;
    total_bytes_ += b;
  }
  // One shard is written as model.safetensors, as transformers' save_pretrained does.
  for (size_t i = 0; i < shards_.size(); ++i)
    names_.push_back(shards_.size() == 1 ? kSingle : shard_name(i, shards_.size()));
  make_dirs(dir);
  advance();
}

CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::advance() {
  while (current_ < tensors_.size() && filled_ == tensors_[current_].numel()) {
    ++current_;
    filled_ = 0;
  }
  // Shards before the current tensor's (all of them at the end) are complete.
  const size_t need = current_ < tensors_.size() ? shard_of_[current_] : shards_.size();
  while (finished_shards_ < need) {
    if (!open_) open_ = std::make_unique<SafetensorsWriter>(dir_ + "/" + names_[finished_shards_],
                                                            shards_[finished_shards_],
                                                            std::map<std::string, std::string>{{"format", "pt"}});
    open_->finish();
    open_.reset();
    ++finished_shards_;
  }
  if (!open_ && current_ < tensors_.size()) {
    open_shard_ = shard_of_[current_];
    open_ = std::make_unique<SafetensorsWriter>(dir_ + "/" + names_[open_shard_], shards_[open_shard_],
                                                std::map<std::string, std::string>{{"format", "pt"}});
  }
}

void CheckpointWriter::append(const at::Tensor& piece) {
  if (piece.numel() == 0) return;
  GLINT_CHECK(current_ < tensors_.size(), dir_, ": a piece of ", piece.numel(), " values beyond the last tensor");
  open_->append(piece);  // checks dtype and size against the tensor
  filled_ += piece.numel();
  advance();
}

void CheckpointWriter::finish() {
  GLINT_CHECK(current_ == tensors_.size(), dir_, ": tensor '", tensors_[std::min(current_, tensors_.size() - 1)].name,
              "' has ", filled_, " of its values");
  advance();  // finishes any trailing shards
  if (shards_.size() == 1) {
    remove_stale_files(dir_, {kSingle});
    return;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::set<std::string> written = {kIndex};
  for (size_t i = 0; i < shards_.size(); ++i) {
    for (const TensorSpec& t : shards_[i]) weight_map[t.name] = names_[i];
    written.insert(names_[i]);
  }
  // The index goes last: until it is renamed into place a reader sees no new index.
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes_}}}, {"weight_map", weight_map}};
  write_text_atomic(dir_ + "/" + kIndex, index.dump(2) + "\n");
  remove_stale_files(dir_, written);
}

void write_checkpoint(const std::string& dir,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      uint64_t max_shard_bytes) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) {
    GLINT_CHECK(t.defined(), dir, ": tensor '", name, "' is undefined");
    specs.push_back(TensorSpec{name, t.scalar_type(), t.sizes().vec()});
  }
  CheckpointWriter writer(dir, std::move(specs), max_shard_bytes);
  for (const auto& kv : tensors) writer.append(kv.second);
  writer.finish();
}

}  // namespace glint
