#include "io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/fs.h"

namespace glint {

namespace {

// Tensor bytes are copied between the file and host memory without byte swapping.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors is little-endian; glint reads it as raw host memory");

struct DtypeName {
  const char* name;
  c10::ScalarType type;
};
// A name's first entry is the one written for its type: U8 comes before the F8_* codes,
// which read as raw bytes (libtorch 1.13 has no float8 dtype).
constexpr DtypeName kDtypes[] = {
    {"F32", c10::kFloat},  {"F16", c10::kHalf},  {"BF16", c10::kBFloat16}, {"F64", c10::kDouble},
    {"I64", c10::kLong},   {"I32", c10::kInt},   {"I16", c10::kShort},     {"I8", c10::kChar},
    {"U8", c10::kByte},    {"BOOL", c10::kBool}, {"F8_E4M3", c10::kByte},  {"F8_E8M0", c10::kByte},
};

// pread until `n` bytes are read; throws naming the file on error or early EOF. Linux
// caps one read at ~2 GiB, so large tensors always take several calls.
void pread_all(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    GLINT_CHECK(got > 0, path, ": read of ", n, " bytes at offset ", offset, " failed (",
                got == 0 ? "unexpected end of file" : std::strerror(errno), ")");
    p += got;
    n -= uint64_t(got);
    offset += uint64_t(got);
  }
}

// "[start, start + count)" for messages, computed without overflowing (a caller may ask
// for count rows from row INT64_MAX).
std::string range_str(int64_t start, int64_t count) {
  int64_t end = 0;
  if (__builtin_add_overflow(start, count, &end))
    return "[" + std::to_string(start) + ", " + std::to_string(start) + " + " + std::to_string(count) + ")";
  return "[" + std::to_string(start) + ", " + std::to_string(end) + ")";
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// prod(shape[from:]) * elem, or false when it does not fit in 64 bits (a hostile header
// could otherwise wrap the product around to match its offsets).
bool byte_size(const std::vector<int64_t>& shape, size_t from, uint64_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (size_t i = from; i < shape.size(); ++i)
    if (__builtin_mul_overflow(n, uint64_t(shape[i]), &n)) return false;
  *out = n;
  return true;
}

// Parses one header entry (everything but the offsets' position in the file).
TensorInfo parse_entry(const std::string& where, const nlohmann::json& v, uint64_t data_start,
                       uint64_t data_size) {
  GLINT_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") &&
                  v.contains("data_offsets"),
              where, ": entry needs dtype, shape and data_offsets");
  GLINT_CHECK(v["dtype"].is_string(), where, ": dtype must be a string");
  TensorInfo info;
  const std::string dtype = v["dtype"].get<std::string>();
  info.dtype = safetensors_dtype(dtype, where);
  info.stored_dtype = dtype;
  GLINT_CHECK(v["shape"].is_array(), where, ": shape must be an array");
  for (const auto& d : v["shape"]) {
    // Unsigned values above INT64_MAX read back negative here and are rejected too.
    GLINT_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, where,
                ": shape entries must be non-negative integers, got ", d.dump());
    info.shape.push_back(d.get<int64_t>());
  }
  const auto& off = v["data_offsets"];
  GLINT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                  off[1].is_number_unsigned(),
              where, ": data_offsets must be [begin, end] with non-negative integers, got ",
              off.dump());
  uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
  GLINT_CHECK(b <= e, where, ": data_offsets [", b, ", ", e, "] are reversed");
  uint64_t need = 0;
  GLINT_CHECK(byte_size(info.shape, 0, c10::elementSize(info.dtype), &need), where,
              ": size mismatch: shape ", shape_str(info.shape), " of ", dtype,
              " overflows 64-bit byte counts");
  GLINT_CHECK(e - b == need, where, ": size mismatch: shape ", shape_str(info.shape), " of ",
              dtype, " needs ", need, " bytes, offsets give ", e - b);
  GLINT_CHECK(e <= data_size, where, ": data_offsets [", b, ", ", e,
              "] out of range: the data buffer after the header has ", data_size, " bytes");
  info.begin = data_start + b;
  info.end = data_start + e;
  return info;
}

int64_t mtime_ns(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec; }

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

c10::ScalarType safetensors_dtype(const std::string& name, const std::string& where) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.type;
  fail(where, ": unknown dtype '", name,
       "' (expected F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3 or F8_E8M0)");
}

std::string safetensors_dtype_name(c10::ScalarType t) {
  for (const auto& d : kDtypes)
    if (t == d.type) return d.name;
  fail("safetensors: dtype ", c10::toString(t), " cannot be stored");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GLINT_CHECK(fd_ >= 0, path, ": cannot open (", std::strerror(errno), ")");
  try {
    struct stat st;
    GLINT_CHECK(::fstat(fd_, &st) == 0, path, ": cannot stat (", std::strerror(errno), ")");
    GLINT_CHECK(S_ISREG(st.st_mode), path, ": not a regular file");
    file_size_ = uint64_t(st.st_size);
    dev_ = uint64_t(st.st_dev);
    ino_ = uint64_t(st.st_ino);
    mtime_ns_ = mtime_ns(st);
    GLINT_CHECK(file_size_ >= 8, path, ": truncated: ", file_size_,
                " bytes, too short for the 8-byte header length");
    uint64_t header_len = 0;
    pread_all(fd_, &header_len, 8, 0, path);
    GLINT_CHECK(header_len <= file_size_ - 8, path, ": header length ", header_len,
                " runs past the end of file (", file_size_, " bytes)");
    std::string header(header_len, '\0');
    pread_all(fd_, header.data(), header_len, 8, path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(header);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
      fail(path, ": header is not valid JSON: ", e.what());
    }
    GLINT_CHECK(j.is_object(), path, ": header JSON must be an object, got ", j.type_name());
    const uint64_t data_start = 8 + header_len, data_size = file_size_ - data_start;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      const auto& v = it.value();
      if (key == "__metadata__") {
        GLINT_CHECK(v.is_object(), path, ": __metadata__ must be an object of strings");
        for (auto m = v.begin(); m != v.end(); ++m) {
          GLINT_CHECK(m.value().is_string(), path, ": __metadata__ value of '", m.key(),
                      "' is not a string");
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      TensorInfo info = parse_entry(path + ": tensor '" + key + "'", v, data_start, data_size);
      info.name = key;
      tensors_.emplace(key, std::move(info));
    }
    // No two tensors may share bytes. Empty tensors own no bytes, so they are left out:
    // kept in, one sitting between two overlapping tensors would hide their overlap.
    std::vector<const TensorInfo*> by_offset;
    for (const auto& kv : tensors_)
      if (kv.second.begin < kv.second.end) by_offset.push_back(&kv.second);
    std::sort(by_offset.begin(), by_offset.end(),
              [](auto* a, auto* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const TensorInfo *prev = by_offset[i - 1], *cur = by_offset[i];
      GLINT_CHECK(cur->begin >= prev->end, path, ": tensors '", prev->name, "' and '", cur->name,
                  "' overlap in the data buffer");
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> SafetensorsFile::keys() const {
  std::vector<std::string> out;
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

bool SafetensorsFile::contains(const std::string& key) const { return tensors_.count(key) > 0; }

const TensorInfo& SafetensorsFile::info(const std::string& key) const {
  auto it = tensors_.find(key);
  GLINT_CHECK(it != tensors_.end(), path_, ": no tensor named '", key, "' (the file holds ",
              tensors_.size(), " tensors)");
  return it->second;
}

at::Tensor SafetensorsFile::read(const std::string& key) const {
  const TensorInfo& ti = info(key);
  at::Tensor t = at::empty(ti.shape, at::TensorOptions().dtype(ti.dtype));
  pread_all(fd_, t.data_ptr(), ti.end - ti.begin, ti.begin, path_);
  check_unchanged();
  return t;
}

at::Tensor SafetensorsFile::read_rows(const std::string& key, int64_t start, int64_t count) const {
  const TensorInfo& ti = info(key);
  GLINT_CHECK(!ti.shape.empty(), path_, ": tensor '", key, "' is a scalar; it has no rows");
  // Written as two comparisons so that start + count cannot overflow.
  GLINT_CHECK(start >= 0 && count >= 0 && start <= ti.shape[0] && count <= ti.shape[0] - start,
              path_, ": tensor '", key, "': rows ", range_str(start, count), " are out of range for shape ",
              shape_str(ti.shape));
  std::vector<int64_t> shape = ti.shape;
  shape[0] = count;
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(ti.dtype));
  // Row-major: the rows of dim 0 are contiguous runs of prod(shape[1:]) elements. The
  // header check bounded the whole tensor's bytes, so this product cannot overflow.
  uint64_t row_bytes = 0;
  byte_size(ti.shape, 1, c10::elementSize(ti.dtype), &row_bytes);
  pread_all(fd_, t.data_ptr(), row_bytes * uint64_t(count),
            ti.begin + row_bytes * uint64_t(start), path_);
  check_unchanged();
  return t;
}

at::Tensor SafetensorsFile::read_flat(const std::string& key, int64_t start, int64_t count) const {
  const TensorInfo& ti = info(key);
  const int64_t n = ti.numel();
  GLINT_CHECK(start >= 0 && count >= 0 && start <= n && count <= n - start, path_, ": tensor '", key,
              "': elements ", range_str(start, count), " are out of range for shape ", shape_str(ti.shape));
  at::Tensor t = at::empty({count}, at::TensorOptions().dtype(ti.dtype));
  const uint64_t es = c10::elementSize(ti.dtype);
  pread_all(fd_, t.data_ptr(), es * uint64_t(count), ti.begin + es * uint64_t(start), path_);
  check_unchanged();
  return t;
}

void SafetensorsFile::check_unchanged() const {
  // A write in place moves the modification time before its bytes land, so a read that
  // overlapped a write sees the new time here, after its own bytes are in.
  struct stat now, at_path;
  GLINT_CHECK(::fstat(fd_, &now) == 0, path_, ": cannot stat (", std::strerror(errno), ")");
  std::string what;
  if (uint64_t(now.st_size) != file_size_)
    what = "its size went from " + std::to_string(file_size_) + " to " + std::to_string(now.st_size) + " bytes";
  else if (mtime_ns(now) != mtime_ns_)
    what = "it was written to";
  else if (::stat(path_.c_str(), &at_path) != 0)
    what = std::string("it was removed (") + std::strerror(errno) + ")";
  else if (uint64_t(at_path.st_dev) != dev_ || uint64_t(at_path.st_ino) != ino_)
    what = "another file was put in its place";
  GLINT_CHECK(what.empty(), path_, ": changed on disk while it was being read (", what,
              "); stopped rather than use a mix of two versions. Load it again once nothing writes to it");
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t TensorSpec::bytes() const { return uint64_t(numel()) * c10::elementSize(dtype); }

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorSpec> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), tensors_(std::move(tensors)) {
  // The header is built from the specs alone, and every check runs before the temp file
  // is created: a rejected plan leaves nothing behind.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors_) {
    GLINT_CHECK(seen.insert(t.name).second, path, ": duplicate tensor name '", t.name, "'");
    GLINT_CHECK(t.name != "__metadata__", path, ": '__metadata__' is not a valid tensor name");
    for (int64_t d : t.shape) GLINT_CHECK(d >= 0, path, ": tensor '", t.name, "' has a negative dimension");
    std::string dt;
    try {
      dt = safetensors_dtype_name(t.dtype);
    } catch (const Error&) {
      fail(path, ": tensor '", t.name, "' has dtype ", c10::toString(t.dtype), ", which safetensors cannot store");
    }
    const uint64_t bytes = t.bytes();
    header[t.name] = {{"dtype", dt}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  tmp_ = path + ".tmp." + std::to_string(::getpid());
  file_ = std::fopen(tmp_.c_str(), "wb");
  GLINT_CHECK(file_, path, ": cannot open '", tmp_, "' for writing (", std::strerror(errno), ")");
  const uint64_t len = h.size();
  if (std::fwrite(&len, 8, 1, file_) != 1 || std::fwrite(h.data(), 1, h.size(), file_) != h.size()) {
    const int err = errno;
    std::fclose(file_);
    std::remove(tmp_.c_str());
    fail(path, ": write failed (", std::strerror(err), ")");
  }
  skip_full();
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!file_) return;
  std::fclose(file_);
  std::remove(tmp_.c_str());
}

void SafetensorsWriter::skip_full() {
  while (current_ < tensors_.size() && filled_ == tensors_[current_].numel()) {
    ++current_;
    filled_ = 0;
  }
}

void SafetensorsWriter::append(const at::Tensor& piece) {
  GLINT_CHECK(file_, path_, ": append after finish");
  if (piece.numel() == 0) return;  // an empty tensor's values: nothing to write
  GLINT_CHECK(current_ < tensors_.size(), path_, ": a piece of ", piece.numel(),
              " values beyond the last tensor");
  const TensorSpec& t = tensors_[current_];
  GLINT_CHECK(piece.scalar_type() == t.dtype, path_, ": tensor '", t.name, "' is ", c10::toString(t.dtype),
              ", got a piece of ", c10::toString(piece.scalar_type()));
  GLINT_CHECK(piece.numel() <= t.numel() - filled_, path_, ": tensor '", t.name, "' needs ",
              t.numel() - filled_, " more values, got a piece of ", piece.numel());
  // bf16/f16 go out as their raw bits.
  const at::Tensor c = piece.detach().to(at::kCPU).contiguous();
  const size_t bytes = size_t(c.numel()) * c.element_size();
  GLINT_CHECK(bytes == 0 || std::fwrite(c.data_ptr(), 1, bytes, file_) == bytes, path_, ": write failed (",
              std::strerror(errno), ")");
  filled_ += c.numel();
  skip_full();
}

void SafetensorsWriter::finish() {
  GLINT_CHECK(file_, path_, ": finished twice");
  GLINT_CHECK(current_ == tensors_.size(), path_, ": tensor '", tensors_[std::min(current_, tensors_.size() - 1)].name,
              "' has ", filled_, " of its values");
  std::FILE* f = file_;
  file_ = nullptr;  // from here on this function cleans up
  bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  int err = errno;
  ok = std::fclose(f) == 0 && ok;
  if (ok && std::rename(tmp_.c_str(), path_.c_str()) == 0) return;
  err = ok ? errno : err;
  std::remove(tmp_.c_str());
  fail(path_, ": cannot finish writing (", std::strerror(err), ")");
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) {
    GLINT_CHECK(t.defined(), path, ": tensor '", name, "' is undefined");
    specs.push_back(TensorSpec{name, t.scalar_type(), t.sizes().vec()});
  }
  SafetensorsWriter writer(path, std::move(specs), metadata);
  // One tensor at a time on the host, so a GPU state dict never has a second full copy.
  for (const auto& kv : tensors) writer.append(kv.second);
  writer.finish();
}

}  // namespace glint
