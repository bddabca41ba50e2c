// safetensors files: validated header, whole or sliced tensor reads with pread, and
// atomic writes.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"k": "v"}}, then the data buffer; offsets are relative to it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace glint {

struct TensorInfo {
  std::string name;
  c10::ScalarType dtype;     // what read() returns: c10::kByte for the F8_* raw codes
  std::string stored_dtype;  // the header's dtype string: "F32", "U8", "F8_E4M3", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // absolute byte offset of the first element in the file
  uint64_t end = 0;    // absolute byte offset one past the last byte
  int64_t numel() const;
};

// A safetensors file opened for reading. The constructor validates the whole header:
// length inside the file, valid JSON, known dtype (F32, BF16, F16, F64, I64, I32, I16,
// I8, U8, BOOL, and the 1-byte floats F8_E4M3 and F8_E8M0, which libtorch 1.13 has no
// dtype for: they read as c10::kByte tensors of raw codes, see io/quantized.h, and
// TensorInfo::stored_dtype tells them from U8), non-negative shape, shape x dtype ==
// byte size, offsets inside the data buffer, no two tensors overlapping. Any violation
// throws glint::Error naming the file, the key and the problem. Reads are pread()s of
// exactly the bytes needed, into the returned tensor's storage; const methods are safe
// to call from several threads.
//
// A file that changes on disk while it is read (written in place: its size or
// modification time moves; or replaced under its path by another file) makes the next
// read, or check_unchanged(), throw glint::Error naming the file: a load never goes on
// with a mix of two versions.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> keys() const;  // sorted
  bool contains(const std::string& key) const;
  // Throws glint::Error naming the file and key when absent.
  const TensorInfo& info(const std::string& key) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The whole tensor, on CPU, in its stored dtype.
  at::Tensor read(const std::string& key) const;
  // Rows [start, start + count) along dim 0, on CPU, in its stored dtype.
  // REQUIRES: the tensor has at least one dimension. Out-of-range rows throw.
  at::Tensor read_rows(const std::string& key, int64_t start, int64_t count) const;
  // Elements [start, start + count) of the row-major flattened tensor: [count], on CPU,
  // in its stored dtype. Out-of-range elements throw.
  at::Tensor read_flat(const std::string& key, int64_t start, int64_t count) const;

  // Throws glint::Error when the file changed since it was opened (see above). Reads
  // check it after their bytes are in; a loader calls it once more when it is done.
  void check_unchanged() const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  // The file as opened: device and inode (the path names another file once replaced),
  // and the modification time (a write in place moves it).
  uint64_t dev_ = 0, ino_ = 0;
  int64_t mtime_ns_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (any device, dtype among those above but F8_*: a kByte tensor is
// written as U8; copied to CPU contiguous) in the given order, with optional string
// metadata. Atomic: a temp file is renamed over `path` only after everything is
// written. Duplicate names throw glint::Error.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor of a file planned before its data exists: name, dtype and shape.
struct TensorSpec {
  std::string name;
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  int64_t numel() const;
  uint64_t bytes() const;
};

// Writes a safetensors file whose header is known before its data: the header from the
// specs first, then the tensors' values in spec order, each in one or more pieces, so a
// caller never holds more than a piece. Atomic like write_safetensors: the bytes go to
// "<path>.tmp.<pid>", renamed over `path` by finish(); a writer destroyed unfinished
// removes its temp file. Duplicate names and dtypes safetensors cannot store throw
// glint::Error before the file is created.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorSpec> tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next values of the first tensor not yet full: `piece` (any shape, on any device)
  // holds at most the elements it still lacks, in its dtype. Throws glint::Error naming
  // the tensor otherwise, or when every tensor is full.
  void append(const at::Tensor& piece);
  // REQUIRES: every tensor full (else glint::Error naming the first that is not).
  // Flushes, fsyncs and renames the file into place.
  void finish();
  const std::string& path() const { return path_; }

 private:
  void skip_full();  // moves current_ past tensors that need nothing more
  std::string path_, tmp_;
  std::vector<TensorSpec> tensors_;
  std::FILE* file_ = nullptr;
  size_t current_ = 0;     // the tensor being filled
  int64_t filled_ = 0;     // its elements written so far
};

// "F32" <-> c10::kFloat, etc. parse throws glint::Error naming `where` for unknown names.
// "F8_E4M3" and "F8_E8M0" parse to c10::kByte; c10::kByte names "U8".
c10::ScalarType safetensors_dtype(const std::string& name, const std::string& where);
std::string safetensors_dtype_name(c10::ScalarType t);

}  // namespace glint
