// A safetensors file: the header checks of SafetensorsFile and its whole, row and flat
// reads, in and out of range.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "io/safetensors.h"

namespace {

// `f` must refuse with glint::Error.
template <typename F>
void expect_refused(F f, const char* what) {
  try {
    f();
  } catch (const glint::Error&) {
    return;
  }
  glint::fuzz::check(false, what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      glint::fuzz::write_scratch("model.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    glint::SafetensorsFile file(path);
    for (const std::string& key : file.keys()) {
      const glint::TensorInfo& info = file.info(key);
      const int64_t n = info.numel();
      at::Tensor whole = file.read(key);
      glint::fuzz::check(whole.numel() == n, "read() returns info().numel() elements");
      glint::fuzz::check(uint64_t(n) * whole.element_size() == info.end - info.begin,
                         "a tensor's bytes are end - begin");
      glint::fuzz::check(file.read_flat(key, n / 2, n - n / 2).numel() == n - n / 2, "read_flat's count");
      expect_refused([&] { file.read_flat(key, n, 1); }, "read_flat past the end throws");
      expect_refused([&] { file.read_flat(key, -1, 1); }, "read_flat before the start throws");
      expect_refused([&] { file.read_flat(key, INT64_MAX, 2); }, "read_flat far past the end throws");
      if (!info.shape.empty()) {
        const int64_t rows = info.shape[0];
        if (rows > 0) glint::fuzz::check(file.read_rows(key, rows - 1, 1).size(0) == 1, "read_rows' count");
        expect_refused([&] { file.read_rows(key, rows, 1); }, "read_rows past the end throws");
        expect_refused([&] { file.read_rows(key, 0, -1); }, "read_rows of a negative count throws");
        expect_refused([&] { file.read_rows(key, INT64_MAX, 2); }, "read_rows far past the end throws");
      }
    }
    expect_refused([&] { file.info("\x01 no such key"); }, "info() of a missing key throws");
  } catch (const glint::Error&) {
  }
  return 0;
}
