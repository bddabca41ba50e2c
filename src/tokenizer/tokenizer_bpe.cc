#include "tokenizer/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <queue>

#include "core/error.h"
#include "tokenizer/unicode_text.h"

namespace glint {

namespace {

// GPT-2's table: printable Latin-1 bytes stand for themselves; the other 68 bytes are
// given the code points 256, 257, ... in byte order.
struct ByteLevelTables {
  char32_t to_char[256];
  std::unordered_map<char32_t, int> to_byte;
  ByteLevelTables() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? char32_t(b) : next++;
      to_byte[to_char[b]] = b;
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kSmallWord = 48;  // below this many symbols the quadratic scan is faster

inline uint64_t mix(uint64_t k) {  // splitmix64 finalizer
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ULL;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebULL;
  k ^= k >> 31;
  return k;
}

}  // namespace

char32_t byte_level_char(uint8_t b) { return tables().to_char[b]; }

int byte_level_byte(char32_t c) {
  const auto& m = tables().to_byte;
  auto it = m.find(c);
  return it == m.end() ? -1 : it->second;
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(byte_level_char(b), &out);
  return out;
}

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges, const std::string& where)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    GLINT_CHECK(id >= 0, where, ": model.vocab: token ", tok, " has negative id ", id);
    max_id = std::max(max_id, id);
  }
  // Ids index dense tables; a few gaps are fine, a vocabulary that is mostly gaps is not.
  GLINT_CHECK(size_t(max_id) < 4 * vocab_.size() + (1u << 20), where, ": model.vocab: largest id ",
              max_id, " is far beyond the ", vocab_.size(), " tokens (ids must be nearly dense)");
  id_to_token_.assign(size_t(max_id + 1), std::string());
  std::vector<bool> seen(size_t(max_id + 1), false);
  for (const auto& [tok, id] : vocab_) {
    GLINT_CHECK(!seen[size_t(id)], where, ": model.vocab: id ", id, " is given to two tokens (",
                id_to_token_[size_t(id)], " and ", tok, ")");
    seen[size_t(id)] = true;
    id_to_token_[size_t(id)] = tok;
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = token_to_id(to_byte_level(std::string(1, char(b))));

  size_t cap = 16;
  while (cap < merges.size() * 2) cap <<= 1;
  table_.assign(cap, MergeEntry{kEmptyKey, 0, 0});
  mask_ = cap - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    int32_t ia = token_to_id(a), ib = token_to_id(b);
    GLINT_CHECK(ia >= 0, where, ": model.merges[", rank, "]: token \"", a, "\" is not in model.vocab");
    GLINT_CHECK(ib >= 0, where, ": model.merges[", rank, "]: token \"", b, "\" is not in model.vocab");
    int32_t merged = token_to_id(a + b);
    GLINT_CHECK(merged >= 0, where, ": model.merges[", rank, "]: merged token \"", a + b,
                "\" is not in model.vocab");
    insert_merge(ia, ib, uint32_t(rank), merged);
  }
}

std::unique_ptr<BpeModel> BpeModel::from_ranks(const std::vector<std::string>& tokens, const std::string& where) {
  std::unique_ptr<BpeModel> owner(new BpeModel());
  BpeModel& m = *owner;
  m.ignore_merges_ = true;
  GLINT_CHECK(tokens.size() <= size_t(INT32_MAX), where, ": ", tokens.size(), " tokens are too many");
  std::unordered_map<std::string_view, int32_t> by_bytes;
  by_bytes.reserve(tokens.size());
  m.vocab_.reserve(tokens.size());
  m.id_to_token_.resize(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    GLINT_CHECK(!tokens[id].empty(), where, ": token ", id, " is empty");
    by_bytes.emplace(tokens[id], int32_t(id));
    m.id_to_token_[id] = to_byte_level(tokens[id]);
    m.vocab_.emplace(m.id_to_token_[id], int32_t(id));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = by_bytes.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", b);
    GLINT_CHECK(it != by_bytes.end(), where, ": byte ", hex,
                " has no token of its own (tiktoken's BPE starts from single bytes)");
    m.byte_ids_[b] = it->second;
  }
  // Every split of every token into two tokens is a merge with the token's rank.
  std::vector<std::pair<std::pair<int32_t, int32_t>, int32_t>> merges;
  for (size_t id = 0; id < tokens.size(); ++id) {
    std::string_view t = tokens[id];
    for (size_t k = 1; k < t.size(); ++k) {
      auto a = by_bytes.find(t.substr(0, k));
      if (a == by_bytes.end()) continue;
      auto b = by_bytes.find(t.substr(k));
      if (b != by_bytes.end()) merges.push_back({{a->second, b->second}, int32_t(id)});
    }
  }
  size_t cap = 16;
  while (cap < merges.size() * 2) cap <<= 1;
  m.table_.assign(cap, MergeEntry{kEmptyKey, 0, 0});
  m.mask_ = cap - 1;
  for (const auto& [pair, id] : merges) m.insert_merge(pair.first, pair.second, uint32_t(id), id);
  return owner;
}

int32_t BpeModel::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::insert_merge(int32_t left, int32_t right, uint32_t rank, int32_t new_id) {
  uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    MergeEntry& e = table_[i];
    if (e.key == kEmptyKey || e.key == key) {  // a duplicate pair: the later rank wins
      e = MergeEntry{key, rank, new_id};
      return;
    }
  }
}

inline const BpeModel::MergeEntry* BpeModel::find_merge(int32_t left, int32_t right) const {
  uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    const MergeEntry& e = table_[i];
    if (e.key == key) return &e;
    if (e.key == kEmptyKey) return nullptr;
  }
}

void BpeModel::merge_small(std::vector<int32_t>* sym) const {
  std::vector<int32_t>& s = *sym;
  constexpr uint32_t kNone = ~uint32_t(0);
  uint32_t ranks[kSmallWord];
  int32_t ids[kSmallWord];  // merged id for each pair
  size_t n = s.size();
  auto pair_at = [&](size_t i) {
    const MergeEntry* m = find_merge(s[i], s[i + 1]);
    ranks[i] = m ? m->rank : kNone;
    ids[i] = m ? m->new_id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) pair_at(i);
  while (n > 1) {
    size_t best = 0;
    uint32_t best_rank = kNone;
    for (size_t i = 0; i + 1 < n; ++i)
      if (ranks[i] < best_rank) best_rank = ranks[i], best = i;
    if (best_rank == kNone) break;
    s[best] = ids[best];
    for (size_t i = best + 1; i + 1 < n; ++i) s[i] = s[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) ranks[i] = ranks[i + 1], ids[i] = ids[i + 1];
    --n;
    s.resize(n);
    if (best > 0) pair_at(best - 1);
    if (best + 1 < n) pair_at(best);
  }
}

void BpeModel::merge_large(std::vector<int32_t>* sym) const {
  std::vector<int32_t>& s = *sym;
  const int n = int(s.size());
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  struct Cand {
    uint32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    if (const MergeEntry* m = find_merge(s[i], s[next[i]])) heap.push({m->rank, i, m->new_id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    int r = next[c.pos];
    const MergeEntry* m = find_merge(s[c.pos], s[r]);
    if (m == nullptr || m->new_id != c.new_id || m->rank != c.rank) continue;  // stale
    s[c.pos] = c.new_id;
    alive[r] = false;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t k = 0;
  for (int i = 0; i < n; ++i)
    if (alive[i]) s[k++] = s[i];
  s.resize(k);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.size() == 1) {
    int32_t id = byte_ids_[static_cast<unsigned char>(word[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  if (ignore_merges_) {
    int32_t id = token_to_id(to_byte_level(word));
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable && cache_.lookup(word, out)) return;
  std::vector<int32_t> sym;
  sym.reserve(word.size());
  for (unsigned char b : word)
    if (byte_ids_[b] >= 0) sym.push_back(byte_ids_[b]);
  if (sym.size() < kSmallWord) merge_small(&sym);
  else merge_large(&sym);
  out->insert(out->end(), sym.begin(), sym.end());
  if (cacheable) cache_.insert(word, sym.data(), sym.size());
}

// ---- WordCache ----

namespace {

uint64_t hash_word(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t(s.size()) * 0xff51afd7ed558ccdULL);
  size_t i = 0, n = s.size();
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = mix(h ^ w);
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, n - i);
    h = mix(h ^ w);
  }
  return h | 1;  // 0 marks an empty slot
}

}  // namespace

const WordCache::Slot* WordCache::find(std::string_view word, uint64_t hash) const {
  if (slots_.empty()) return nullptr;
  for (size_t i = hash & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return &s;
    if (s.hash == hash && s.key_size == word.size() &&
        std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0)
      return &s;
  }
}

bool WordCache::lookup(std::string_view word, std::vector<int32_t>* out) const {
  uint64_t h = hash_word(word);
  std::lock_guard<std::mutex> lock(mu_);
  const Slot* s = find(word, h);
  if (s == nullptr || s->hash == 0) return false;
  out->insert(out->end(), ids_.begin() + s->ids_offset, ids_.begin() + s->ids_offset + s->ids_size);
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t n) {
  uint64_t h = hash_word(word);
  std::lock_guard<std::mutex> lock(mu_);
  if (slots_.empty() || entries_ >= kMaxEntries || keys_.size() + word.size() > kMaxKeyBytes ||
      ids_.size() + n > kMaxIds) {  // start over
    slots_.assign(kSlots, Slot{0, 0, 0, 0, 0});
    keys_.clear();
    ids_.clear();
    entries_ = 0;
  }
  Slot* s = const_cast<Slot*>(find(word, h));
  if (s->hash != 0) return;  // another thread cached it first
  *s = Slot{h, uint32_t(keys_.size()), uint32_t(word.size()), uint32_t(ids_.size()), uint32_t(n)};
  keys_.append(word);
  ids_.insert(ids_.end(), ids, ids + n);
  ++entries_;
}

}  // namespace glint
