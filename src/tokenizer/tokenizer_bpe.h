// Byte-level BPE model: vocabulary, ranked merges, and the merge loop with a word cache.
//
// A "word" is one pre-token as raw UTF-8 bytes. Its initial symbols are the vocabulary
// ids of the byte-level characters of its bytes (GPT-2's byte -> printable character
// map); then, repeatedly, the adjacent pair with the lowest merge rank (leftmost on
// ties) is replaced by the merged token, until no adjacent pair has a merge. This is
// the order `tokenizers`' BPE applies merges in, so the ids agree.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace glint {

// The GPT-2 byte-level alphabet: byte b <-> one printable code point.
char32_t byte_level_char(uint8_t b);
// The byte that code point `c` stands for, or -1 when `c` is not in the alphabet.
int byte_level_byte(char32_t c);
// The byte-level spelling of raw bytes (every byte becomes one code point, UTF-8 encoded).
std::string to_byte_level(std::string_view bytes);

// A bounded cache from word bytes to ids: one flat open-addressing table over two
// arenas (key bytes, ids), emptied whole when full. Thread-safe.
class WordCache {
 public:
  // Appends the cached ids of `word` to `out` and returns true; false when not cached.
  bool lookup(std::string_view word, std::vector<int32_t>* out) const;
  // Caches ids[0..n) for `word` (no-op when already there).
  void insert(std::string_view word, const int32_t* ids, size_t n);

 private:
  struct Slot {
    uint64_t hash;  // 0: empty
    uint32_t key_offset, key_size, ids_offset, ids_size;
  };
  static constexpr size_t kSlots = size_t(1) << 18;       // 6 MB of slots
  static constexpr size_t kMaxEntries = kSlots / 2;       // load factor <= 1/2
  static constexpr size_t kMaxKeyBytes = size_t(1) << 24;
  static constexpr size_t kMaxIds = size_t(1) << 22;
  const Slot* find(std::string_view word, uint64_t hash) const;  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  std::vector<Slot> slots_;  // allocated on first insert
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t entries_ = 0;
};

class BpeModel {
 public:
  // vocab: token (byte-level spelling) -> id. merges: pairs of tokens in rank order
  // (a later duplicate of a pair overrides the earlier rank, as in `tokenizers`).
  // Throws glint::Error naming `where` and the token when a merge names a token (or a
  // concatenation) that is not in the vocabulary, or when an id is negative/duplicated.
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           const std::string& where);

  // tiktoken's BPE: `tokens[rank]` holds the bytes of the token whose id is `rank`. A
  // pair of adjacent symbols merges when their concatenation is a token, lowest rank
  // first (leftmost on ties), and a word that is itself a token is that token (as
  // tiktoken looks a piece up before merging). Every pair (a, b) of tokens whose
  // concatenation is a token c gets the merge rank of c, so the merge loop below is
  // tiktoken's. Throws glint::Error naming `where` when a byte has no token of its own
  // (tiktoken starts from single bytes) or a token is empty.
  static std::unique_ptr<BpeModel> from_ranks(const std::vector<std::string>& tokens, const std::string& where);

  // Appends the ids of `word` (raw bytes, non-empty) to `out`. Bytes whose byte-level
  // character is not in the vocabulary are dropped (no unk token). Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

  // The token spelled exactly `token` (byte-level spelling), or -1.
  int32_t token_to_id(const std::string& token) const;
  // id -> token (byte-level spelling); "" for an id with no token.
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  size_t vocab_size() const { return vocab_.size(); }

 private:
  struct MergeEntry {
    uint64_t key;     // (left id << 32) | right id; kEmptyKey for a free slot
    uint32_t rank;
    int32_t new_id;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t(0);

  // The merge of (left, right), or nullptr.
  const MergeEntry* find_merge(int32_t left, int32_t right) const;
  void insert_merge(int32_t left, int32_t right, uint32_t rank, int32_t new_id);
  void merge_small(std::vector<int32_t>* sym) const;  // O(n^2) scan, for short words
  void merge_large(std::vector<int32_t>* sym) const;  // heap, for long words
  BpeModel() = default;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<MergeEntry> table_;  // open addressing, power-of-two size
  uint64_t mask_ = 0;
  int32_t byte_ids_[256];  // id of each byte's byte-level character, or -1
  bool ignore_merges_ = false;

  mutable WordCache cache_;  // words of at most kMaxCachedWordBytes
};

}  // namespace glint
