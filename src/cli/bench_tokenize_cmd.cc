// glint bench tokenize: encode throughput of a tokenizer.json on a corpus, one JSON object.
//
// The corpus is --file (one JSON string per line, the `glint tokenize` input format) or
// a built-in deterministic mix (English prose, code, Chinese, numbers; ~2 MB), which
// --write-corpus saves so another implementation can be timed on the same texts.
// MB/s counts the UTF-8 bytes of the texts; encoding runs on one thread.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/fs.h"
#include "tokenizer/tokenizer.h"

namespace glint::cli {

namespace {

struct BenchTokenizeOptions {
  std::string tokenizer;     // directory with tokenizer.json, or the file
  std::string file;          // corpus: one JSON string per line; empty = built-in
  std::string write_corpus;  // where to save the built-in corpus (JSONL), if set
  int passes = 3;            // timed passes over the corpus; the best is reported
};

// Deterministic built-in corpus: 4000 texts of a few hundred bytes each.
std::vector<std::string> builtin_corpus() {
  static const char* const kWords[] = {
      "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
      "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
      "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been",
      "model", "training", "experts", "router", "token", "layer", "gradient", "memory", "parallel",
      "language", "attention", "learning", "rate", "batch", "sequence", "data", "system", "time",
      "people", "world", "however", "because", "through", "between", "important", "different"};
  static const char* const kCode[] = {
      "def forward(self, x):\n    h = self.norm(x)\n    return x + self.mlp(h)\n",
      "for (int64_t i = 0; i < n; ++i) {\n  out[i] = a[i] * b[i] + c;\n}\n",
      "if (err != nullptr) {\n\treturn -1;\n}\n", "import torch\nfrom typing import Optional\n",
      "const x = await fetch(url, { method: 'POST' });\n", "SELECT id, name FROM users WHERE age > 30;\n"};
  uint64_t state = 42;
  auto next = [&state]() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  auto below = [&next](uint64_t n) { return next() % n; };
  std::vector<std::string> texts;
  for (int t = 0; t < 4000; ++t) {
    std::string s;
    uint64_t kind = below(20);
    if (kind < 13) {  // prose
      int n = 40 + int(below(80));
      for (int i = 0; i < n; ++i) {
        std::string w = kWords[below(sizeof(kWords) / sizeof(kWords[0]))];
        if (i == 0 || below(12) == 0) w[0] = char(w[0] - 'a' + 'A');
        s += w;
        uint64_t p = below(20);
        s += p == 0 ? ". " : p == 1 ? ", " : p == 2 ? "'s " : " ";
      }
      if (below(3) == 0) s += std::to_string(below(100000)) + " " + std::to_string(below(1000)) + ".";
    } else if (kind < 16) {  // code
      int n = 2 + int(below(6));
      for (int i = 0; i < n; ++i) s += kCode[below(sizeof(kCode) / sizeof(kCode[0]))];
    } else if (kind < 19) {  // Chinese with punctuation
      int n = 60 + int(below(120));
      for (int i = 0; i < n; ++i) {
        uint32_t c = 0x4E00 + uint32_t(below(0x1400));
        s += char(0xE0 | (c >> 12));
        s += char(0x80 | ((c >> 6) & 0x3F));
        s += char(0x80 | (c & 0x3F));
        if (below(15) == 0) s += "\xEF\xBC\x8C";  // U+FF0C fullwidth comma
      }
      s += "\xE3\x80\x82";  // U+3002
    } else {  // numbers and tables
      int n = 10 + int(below(30));
      for (int i = 0; i < n; ++i) s += std::to_string(below(1000000000)) + (below(4) ? "\t" : "\n");
    }
    texts.push_back(std::move(s));
  }
  return texts;
}

std::vector<std::string> read_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GLINT_CHECK(in.good(), path, ": cannot open the corpus file");
  std::vector<std::string> texts;
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    GLINT_CHECK(j.is_string(), path, ":", lineno, ": expected one JSON string per line");
    texts.push_back(j.get<std::string>());
  }
  return texts;
}

int run_bench_tokenize(const BenchTokenizeOptions& o) {
  GLINT_CHECK(o.passes >= 1, "--passes must be >= 1, got ", o.passes);
  std::vector<std::string> texts = o.file.empty() ? builtin_corpus() : read_corpus(o.file);
  if (!o.write_corpus.empty()) {
    std::string jsonl;
    for (const std::string& t : texts) jsonl += nlohmann::json(t).dump() + "\n";
    write_text_atomic(o.write_corpus, jsonl);
  }
  auto t0 = std::chrono::steady_clock::now();
  Tokenizer tok = Tokenizer::load(o.tokenizer);
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t bytes = 0, tokens = 0;
  for (const std::string& t : texts) bytes += t.size();
  double first = 0, best = 1e300;
  for (int p = 0; p < o.passes; ++p) {
    tokens = 0;
    auto a = std::chrono::steady_clock::now();
    for (const std::string& t : texts) tokens += tok.encode(t).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    if (p == 0) first = s;
    best = std::min(best, s);
  }
  nlohmann::json out = {
      {"bench", "tokenize"},
      {"tokenizer", o.tokenizer},
      {"corpus", o.file.empty() ? "builtin" : o.file},
      {"texts", texts.size()},
      {"bytes", bytes},
      {"tokens", tokens},
      {"threads", 1},
      {"passes", o.passes},
      {"load_s", load_s},
      {"first_pass_mb_s", double(bytes) / first / 1e6},
      {"encode_mb_s", double(bytes) / best / 1e6},
  };
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace

CLI::App* add_bench_tokenize(CLI::App& bench, Action* action) {
  CLI::App* cmd = bench.add_subcommand("tokenize", "tokenizer.json encode throughput (MB/s)");
  auto o = std::make_shared<BenchTokenizeOptions>();
  cmd->add_option("--tokenizer", o->tokenizer, "directory holding tokenizer.json, or the file")
      ->required();
  cmd->add_option("--file", o->file, "corpus: one JSON string per line (default: built-in mix)");
  cmd->add_option("--write-corpus", o->write_corpus, "save the corpus used as JSONL here");
  cmd->add_option("--passes", o->passes, "timed passes; the fastest is reported")->capture_default_str();
  *action = [o]() { return run_bench_tokenize(*o); };
  return cmd;
}

}  // namespace glint::cli
