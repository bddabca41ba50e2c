// tokenizer.json: Tokenizer::load (model, normalizer, pre-tokenizer regexes, added
// tokens, post-processor), then encode and decode of fixed texts with what loaded.
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      glint::fuzz::write_scratch("tokenizer.json", std::string_view(reinterpret_cast<const char*>(data), size));
  std::optional<glint::Tokenizer> tok;
  try {
    tok.emplace(glint::Tokenizer::load(path));
  } catch (const glint::Error&) {
    return 0;
  }
  for (const char* text : {"", "Hello world, it's 2024!", "<|im_start|>user\n caf\xc3\xa9  cat\r\n\t<mask> x",
                           "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 ABC abc 12345"}) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids;
      try {
        ids = tok->encode(text, special);  // a vocabulary without some byte's token refuses
      } catch (const glint::Error&) {
        continue;
      }
      // What encode gave, decode takes.
      for (int32_t id : ids) {
        glint::fuzz::check(id >= 0 && id < tok->vocab_size(), "encode gives ids in [0, vocab_size)");
        (void)tok->token_bytes(id);
      }
      (void)tok->decode(ids, false);
      (void)tok->decode(ids, true);
    }
  }
  for (const auto& added : tok->added_tokens())
    glint::fuzz::check(tok->token_to_id(added.content) >= 0, "an added token has an id");
  return 0;
}
