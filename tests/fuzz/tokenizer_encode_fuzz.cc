// Arbitrary text through the fixture tokenizer (tests/data/tokenizer_fixture: NFC, a
// Split regex, byte-level BPE, added tokens with lstrip/single_word/normalized flags).
// Valid UTF-8 must encode, and decode must take what encode gave; ill-formed UTF-8 is
// refused with glint::Error.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace {
const glint::Tokenizer& fixture() {
  static const glint::Tokenizer tok = glint::Tokenizer::load(GLINT_SOURCE_DIR "/tests/data/tokenizer_fixture");
  return tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const glint::Tokenizer& tok = fixture();
  const bool valid = glint::fuzz::valid_utf8(text);
  for (bool special : {false, true}) {
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(text, special);
    } catch (const glint::Error&) {
      glint::fuzz::check(!valid, "valid UTF-8 encodes");
      return 0;
    }
    glint::fuzz::check(valid, "ill-formed UTF-8 is refused");
    for (int32_t id : ids) glint::fuzz::check(id >= 0 && id < tok.vocab_size(), "encode gives ids in [0, vocab_size)");
    (void)tok.decode(ids, special);
  }
  return 0;
}
