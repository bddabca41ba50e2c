// Tinker API requests to the service behind `glint serve`: Service::handle with the
// request bodies (and paths) the HTTP server would pass it. The service holds a session
// and a model, so the routes that need them read their bodies; "$SESSION" and "$MODEL"
// in an input become their ids. A request is answered, never thrown out of handle(); a
// 500 (an unexpected exception inside the service) is a bug.
//
// Input: "METHOD PATH[ IDEMPOTENCY-KEY]\n" then the body.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "model/family.h"
#include "serve/service.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Served {
  std::unique_ptr<glint::Service> service;
  std::string session, model;
  int uses = 0;
};

const glint::Tokenizer& tokenizer() {
  static const glint::Tokenizer tok = glint::Tokenizer::load(GLINT_SOURCE_DIR "/tests/data/tokenizer_fixture");
  return tok;
}

glint::HttpResponse post(glint::Service& s, const std::string& route, const std::string& body) {
  glint::HttpRequest req;
  req.method = "POST";
  req.path = "/api/v1/" + route;
  req.body = body;
  return s.handle(req);
}

// A fresh service every 500 inputs: the queued requests of the earlier ones (no ranks
// run them) go with it.
Served& served() {
  static Served s;
  if (s.service && s.uses++ < 500) return s;
  s = Served{};
  const std::string dir = glint::fuzz::scratch_dir() + "/state";
  std::filesystem::remove_all(dir);
  glint::ServiceOptions o;
  o.base_model = "tiny";
  o.state_dir = dir;
  o.poll_seconds = 0;  // retrieve_future answers try_again at once
  o.vocab_size = tokenizer().vocab_size();
  o.max_positions = 64;
  o.lora_targets = glint::family_for("qwen3_moe", "fuzz").lora_targets();
  o.encode = [](const std::string& text) {
    std::vector<int64_t> ids;
    for (int32_t id : tokenizer().encode(text, false)) ids.push_back(id);
    return ids;
  };
  s.service = std::make_unique<glint::Service>(o);
  auto session = nlohmann::json::parse(post(*s.service, "create_session", "{}").body);
  s.session = session.at("session_id").get<std::string>();
  auto model = nlohmann::json::parse(
      post(*s.service, "create_model",
           R"({"session_id": ")" + s.session + R"(", "base_model": "tiny", "lora_config": {"rank": 2}})")
          .body);
  s.model = model.at("model_id").get<std::string>();
  return s;
}

void replace_all(std::string* s, const std::string& from, const std::string& to) {
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size()))
    s->replace(at, from.size(), to);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  Served& s = served();
  replace_all(&input, "$SESSION", s.session);
  replace_all(&input, "$MODEL", s.model);
  const size_t eol = input.find('\n');
  const std::string head = input.substr(0, eol);
  glint::HttpRequest req;
  req.body = eol == std::string::npos ? "" : input.substr(eol + 1);
  const size_t sp1 = head.find(' ');
  req.method = head.substr(0, sp1);
  if (sp1 != std::string::npos) {
    const size_t sp2 = head.find(' ', sp1 + 1);
    req.path = head.substr(sp1 + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp1 - 1);
    if (sp2 != std::string::npos) req.idempotency_key = head.substr(sp2 + 1);
  }
  const size_t q = req.path.find('?');
  if (q != std::string::npos) {  // one query parameter, as the listings take them
    const std::string query = req.path.substr(q + 1);
    req.path.resize(q);
    const size_t eq = query.find('=');
    req.query[query.substr(0, eq)] = eq == std::string::npos ? "" : query.substr(eq + 1);
  }
  const glint::HttpResponse r = s.service->handle(req);
  glint::fuzz::check(r.status != 500, "a request is answered without a server error");
  glint::fuzz::check(nlohmann::json::accept(r.body), "the answer is JSON");
  return 0;
}
