// The service's queue, in process and without a model: requests go in through
// Service::handle, the cycles' programs come out of next_program and are answered with
// made-up results. What is checked is which operations a cycle holds, whatever the
// interleaving of requests of several kinds, models and owners.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>

#include "serve/proto_util.h"
#include "serve/serve_util.h"
#include "serve/service.h"

namespace {

using json = nlohmann::json;
namespace proto = glint::testing::proto;

using glint::testing::kAlice;
using glint::testing::kBob;

struct Queue {
  glint::ServiceOptions o;
  std::unique_ptr<glint::Service> s;
  explicit Queue(const std::string& name) {
    o.base_model = "m";
    o.state_dir = glint::testing::fresh_temp_dir(name);
    o.api_keys = {{kAlice, "alice"}, {kBob, "bob"}};
    o.vocab_size = 100;
    o.max_positions = 64;
    o.lora_targets = {"q_proj", "v_proj"};
    o.cycle_window = 0;
    o.poll_seconds = 0;
    o.seq_wait = 1000;  // a gap in seq_ids is waited for as long as the test runs
    s = std::make_unique<glint::Service>(o);
  }
  glint::HttpResponse post(const std::string& key, const std::string& route, const json& body) {
    glint::HttpRequest r;
    r.method = "POST";
    r.path = "/api/v1/" + route;
    r.api_key = key;
    r.body = body.dump();
    r.content_type = "application/json";
    return s->handle(r);
  }
  json ok(const std::string& key, const std::string& route, const json& body) {
    glint::HttpResponse r = post(key, route, body);
    EXPECT_EQ(r.status, 200) << route << ": " << r.body;
    return json::parse(r.body, nullptr, false);
  }
  // The next cycle's operations ("op" of each; a forward's items as "forward:N"), each
  // answered with a success.
  std::vector<std::string> cycle() {
    json program = s->next_program(0);
    std::vector<std::string> kinds;
    json results = json::array();
    for (const json& op : program.at("ops")) {
      const std::string kind = op.at("op");
      if (kind == "forward") {
        json per = json::array();
        for (size_t i = 0; i < op.at("items").size(); ++i)
          per.push_back({{"result", {{"loss_fn_output_type", "TensorData"}, {"loss_fn_outputs", json::array()},
                                     {"metrics", {{"loss:sum", 1.0}}}}}});
        results.push_back({{"result", per}});
        kinds.push_back("forward:" + std::to_string(op.at("items").size()));
      } else {
        json r;
        if (kind == "optim") r = {{"grad_norm", 1.0}, {"step", 1}};
        if (kind == "page_in") r = {{"step", 0}};
        results.push_back({{"result", r}});
        kinds.push_back(kind);
      }
    }
    s->complete(results);
    return kinds;
  }
  std::string model(const std::string& key) {
    const std::string session = ok(key, "create_session", json::object())["session_id"];
    const std::string id = ok(key, "create_model", {{"session_id", session}, {"base_model", "m"},
                                                    {"lora_config", {{"rank", 2}}}})["model_id"];
    EXPECT_EQ(cycle(), std::vector<std::string>({"add"}));
    return id;
  }
};

json fb(const std::string& model, int64_t seq, int64_t token = 3) {
  json datum = {{"model_input", {{"chunks", {{{"tokens", {1, 2}}}}}}},
                {"loss_fn_inputs", {{"target_tokens", {{"data", {2, token}}, {"dtype", "int64"}}}}}};
  return {{"model_id", model}, {"seq_id", seq}, {"forward_backward_input", {{"data", {datum}}, {"loss_fn", "cross_entropy"}}}};
}

TEST(ServiceQueue, ANamedSaveIsTakenWhileAnotherOwnersRequestWaits) {
  Queue q("queue_save_race");
  const std::string a = q.model(kAlice), b = q.model(kBob);
  // Bob's forward_backward waits for seq_ids 1-4, which never come.
  q.ok(kBob, "forward_backward", fb(b, 5));
  // Alice saves by name, both kinds: each is taken, whatever else is queued.
  q.ok(kAlice, "save_weights", {{"model_id", a}, {"path", "named"}, {"seq_id", 1}});
  q.ok(kAlice, "save_weights_for_sampler", {{"model_id", a}, {"path", "named"}, {"seq_id", 2}});
  // A second save of a name being saved is refused as such.
  glint::HttpResponse again = q.post(kAlice, "save_weights", {{"model_id", a}, {"path", "named"}, {"seq_id", 3}});
  EXPECT_EQ(again.status, 409) << again.body;
  EXPECT_NE(again.body.find("being saved already"), std::string::npos) << again.body;
  EXPECT_EQ(q.cycle(), std::vector<std::string>({"save_state", "save_adapter"}));  // bob's still waits
}

TEST(ServiceQueue, PipelinedForwardBackwardOptimAndSaveRunInOneCycleInOrder) {
  Queue q("queue_pipelined");
  const std::string a = q.model(kAlice);
  for (int step = 0; step < 5; ++step) {
    const int64_t seq = 1 + 3 * step;
    q.ok(kAlice, "forward_backward", fb(a, seq));
    q.ok(kAlice, "optim_step", {{"model_id", a}, {"seq_id", seq + 1}, {"adam_params", json::object()}});
    q.ok(kAlice, "save_weights", {{"model_id", a}, {"path", "step-" + std::to_string(step)}, {"seq_id", seq + 2}});
    EXPECT_EQ(q.cycle(), std::vector<std::string>({"forward:1", "optim", "save_state"}));
  }
}

TEST(ServiceQueue, ARefusedRequestSpendsItsSeqId) {
  Queue q("queue_refused_seq");
  const std::string a = q.model(kAlice);
  // seq 1 refused (a token outside the vocabulary): seq 2 runs at once, not after a wait.
  glint::HttpResponse refused = q.post(kAlice, "forward_backward", fb(a, 1, 500));
  EXPECT_EQ(refused.status, 400) << refused.body;
  q.ok(kAlice, "forward_backward", fb(a, 2));
  EXPECT_EQ(q.cycle(), std::vector<std::string>({"forward:1"}));
  // The same for a protobuf body that does not decode (its seq_id is read all the same)
  // and for an optim_step with a bad parameter.
  glint::HttpRequest r;
  r.method = "POST";
  r.path = "/api/v1/forward_backward";
  r.api_key = kAlice;
  r.content_type = "application/x-protobuf";
  std::string head;
  proto::bytes_field(&head, 1, a);
  proto::varint_field(&head, 2, 3);
  r.body = head + "\x1a\x7f";  // data[0] longer than the body
  EXPECT_EQ(q.s->handle(r).status, 400);
  EXPECT_EQ(q.post(kAlice, "optim_step", {{"model_id", a}, {"seq_id", 4}, {"adam_params", {{"beta1", 2.0}}}}).status, 400);
  q.ok(kAlice, "optim_step", {{"model_id", a}, {"seq_id", 5}, {"adam_params", json::object()}});
  EXPECT_EQ(q.cycle(), std::vector<std::string>({"optim"}));
  // A gap nobody refused is still waited for.
  q.ok(kAlice, "forward_backward", fb(a, 7));
  EXPECT_EQ(q.cycle(), std::vector<std::string>());
  // Another owner's refusal naming this model spends nothing of it.
  EXPECT_EQ(q.post(kBob, "forward_backward", fb(a, 6, 500)).status, 400);
  EXPECT_EQ(q.cycle(), std::vector<std::string>());
  q.ok(kAlice, "forward_backward", fb(a, 6));
  EXPECT_EQ(q.cycle(), std::vector<std::string>({"forward:2"}));
}

TEST(ServiceQueue, AModelWaitingForASlotTakesOneFromAModelThatKeepsWorking) {
  Queue q("queue_preempt");
  q.o.max_tenants = 1;
  q.o.preempt_after = 0;
  q.s = std::make_unique<glint::Service>(q.o);
  const std::string a = q.model(kAlice);
  const std::string session = q.ok(kBob, "create_session", json::object())["session_id"];
  const std::string b = q.ok(kBob, "create_model", {{"session_id", session}, {"base_model", "m"},
                                                    {"lora_config", {{"rank", 2}}}})["model_id"];
  EXPECT_EQ(q.cycle(), std::vector<std::string>({"page_out", "add"}));  // a was idle
  // Both always have work queued: each cycle the one that has waited longer runs.
  for (int64_t seq = 1; seq <= 3; ++seq) {
    q.ok(kAlice, "forward_backward", fb(a, seq));
    q.ok(kBob, "forward_backward", fb(b, seq));
    EXPECT_EQ(q.cycle(), std::vector<std::string>({"page_out", "page_in", "forward:1"})) << seq;  // a's turn
    EXPECT_EQ(q.cycle(), std::vector<std::string>({"page_out", "page_in", "forward:1"})) << seq;  // b's turn
  }
}

TEST(ServiceQueue, AModelNeverTrainedBeforeAKillIsMadeAgainFromItsSeed) {
  Queue q("queue_fresh");
  const std::string a = q.model(kAlice);
  q.s.reset();  // the process ends without paging anything out
  q.s = std::make_unique<glint::Service>(q.o);
  // Its first request after the restart names where it continues from, and runs after
  // the adapter is made again, whatever its seq_id.
  const json r = q.ok(kAlice, "forward_backward", fb(a, 1));
  EXPECT_NE(r.value("message", "").find("continues from its initial state"), std::string::npos) << r.dump();
  q.ok(kAlice, "optim_step", {{"model_id", a}, {"seq_id", 2}, {"adam_params", json::object()}});
  EXPECT_EQ(q.cycle(), std::vector<std::string>({"add", "forward:1", "optim"}));
}

TEST(ServiceQueue, HealthChecksNeedNoKeyAndEveryAnswerIsLoggedWithoutIt) {
  Queue q("queue_health");
  std::vector<std::string> lines;
  q.o.access_log = [&](const std::string& line) { lines.push_back(line); };
  q.s = std::make_unique<glint::Service>(q.o);
  glint::HttpRequest health;
  health.method = "GET";
  health.path = "/api/v1/healthz";
  EXPECT_EQ(q.s->handle(health).status, 200);
  glint::HttpRequest caps = health;
  caps.path = "/api/v1/get_server_capabilities";
  EXPECT_EQ(q.s->handle(caps).status, 401);  // everything else needs one
  q.ok(kAlice, "create_session", json::object());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("- GET /api/v1/healthz 200 ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("- GET /api/v1/get_server_capabilities 401 ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("alice POST /api/v1/create_session 200 ", 0), 0u) << lines[2];
  for (const auto& l : lines) EXPECT_EQ(l.find("tml-"), std::string::npos) << l;
}

}  // namespace
