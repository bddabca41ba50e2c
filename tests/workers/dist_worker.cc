// Started by multi-rank tests through `glint launch -n W -- glint_dist_worker CASE`.
// Each case checks collectives against values derived by hand from the rank numbers and
// exits non-zero (printing the mismatch) when one is wrong.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "core/process_settings.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "model/moe.h"
#include "parallel/expert_parallel.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  if (ok) return;
  ++failures;
  std::cout << "MISMATCH " << what << "\ngot " << got << "\nwant " << want << std::endl;
}

void expect_equal(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  check(got.sizes() == want.sizes() && at::equal(got, want), what, got, want);
}

// Every collective in `dt` (float32, and bf16, which Gloo moves as bytes and sums in
// float32); the values are small integers, exact in both.
void comm_case_in(glint::Comm& c, at::ScalarType dt) {
  const int r = c.rank(), W = c.size();
  const std::string in = std::string(" (") + c10::toString(dt) + ")";
  auto T = [dt](const at::Tensor& t) { return t.to(dt); };
  // all_reduce: sum over ranks of (r + 1) * [1, 2] = W(W+1)/2 * [1, 2].
  at::Tensor t = T(at::tensor({1.0f, 2.0f}) * float(r + 1));
  c.all_reduce_sum(t);
  float tri = W * (W + 1) / 2.0f;
  expect_equal("all_reduce" + in, t, T(at::tensor({tri, 2 * tri})));
  // all_gather: rank i contributes a [2, 3] block filled with i.
  at::Tensor g = c.all_gather(T(at::full({2, 3}, float(r))));
  at::Tensor want_g = at::empty({2 * W, 3});
  for (int i = 0; i < W; ++i) want_g.narrow(0, 2 * i, 2).fill_(float(i));
  expect_equal("all_gather" + in, g, T(want_g));
  // reduce_scatter: every rank holds arange(2W) * (r + 1); rank r gets its chunk times tri.
  at::Tensor rs = c.reduce_scatter_sum(T(at::arange(2 * W, at::kFloat) * float(r + 1)));
  expect_equal("reduce_scatter" + in, rs, T(at::tensor({2.0f * r, 2.0f * r + 1}) * tri));
  // Uneven all_to_all: rank i sends (i + j) % 3 rows to rank j; each row is
  // [i, j, k] (source, destination, index within the message).
  std::vector<int64_t> send(W), recv(W);
  for (int j = 0; j < W; ++j) send[j] = (r + j) % 3;
  for (int i = 0; i < W; ++i) recv[i] = (i + r) % 3;
  std::vector<float> rows;
  for (int j = 0; j < W; ++j)
    for (int k = 0; k < send[j]; ++k) rows.insert(rows.end(), {float(r), float(j), float(k)});
  int64_t n_send = std::accumulate(send.begin(), send.end(), int64_t(0));
  at::Tensor src = T(at::tensor(rows).view({n_send, 3}));
  const uint64_t before = c.bytes_sent().count("all_to_all") ? c.bytes_sent().at("all_to_all") : 0;
  at::Tensor got = c.all_to_all(src, send, recv);
  std::vector<float> want_rows;
  for (int i = 0; i < W; ++i)
    for (int k = 0; k < recv[i]; ++k) want_rows.insert(want_rows.end(), {float(i), float(r), float(k)});
  int64_t n_recv = std::accumulate(recv.begin(), recv.end(), int64_t(0));
  expect_equal("all_to_all" + in, got, T(at::tensor(want_rows).view({n_recv, 3})));
  uint64_t want_bytes = 0;
  for (int j = 0; j < W; ++j)
    if (j != r) want_bytes += send[j] * 3 * c10::elementSize(dt);
  if (c.bytes_sent().at("all_to_all") - before != want_bytes) {
    ++failures;
    std::cout << "MISMATCH all_to_all bytes" << in << " " << c.bytes_sent().at("all_to_all") - before << " vs "
              << want_bytes << "\n";
  }
  // Started collectives: two all-gathers and a reduce-scatter in flight at once, a
  // blocking all_reduce issued between them, waited for out of order.
  auto g1 = c.start_all_gather(T(at::full({2, 3}, float(r))));
  auto rs1 = c.start_reduce_scatter_sum(T(at::arange(2 * W, at::kFloat) * float(r + 1)));
  auto g2 = c.start_all_gather(T(at::full({1, 2}, float(10 * r))));
  at::Tensor between = T(at::full({3}, 1.0f));
  c.all_reduce_sum(between);
  expect_equal("all_reduce between started ones" + in, between, T(at::full({3}, float(W))));
  at::Tensor want_g2 = at::empty({W, 2});
  for (int i = 0; i < W; ++i) want_g2[i].fill_(float(10 * i));
  expect_equal("started all_gather, second" + in, g2->wait(), T(want_g2));
  expect_equal("started reduce_scatter" + in, rs1->wait(), T(at::tensor({2.0f * r, 2.0f * r + 1}) * tri));
  expect_equal("started all_gather, first" + in, g1->wait(), T(want_g));
  // One dropped without a wait is finished all the same (the next collective still pairs).
  c.start_all_gather(T(at::full({1}, float(r))));
  // broadcast from the last rank.
  at::Tensor b = T(at::full({4}, float(r)));
  c.broadcast(b, W - 1);
  expect_equal("broadcast" + in, b, T(at::full({4}, float(W - 1))));
  // gather to rank 0: rank i sends [i, 10 i].
  at::Tensor ga = c.gather(T(at::tensor({float(r), 10.0f * r}).view({1, 2})), 0);
  if (r == 0) {
    at::Tensor want = at::empty({W, 2});
    for (int i = 0; i < W; ++i) {
      want[i][0] = float(i);
      want[i][1] = 10.0f * i;
    }
    expect_equal("gather" + in, ga, T(want));
  }
}

int comm_case(glint::Comm& c) {
  comm_case_in(c, at::kFloat);
  comm_case_in(c, at::kBFloat16);
  c.barrier();
  std::cout << "comm ok on rank " << c.rank() << " of " << c.size() << std::endl;
  return failures ? 1 : 0;
}

// W = 4 as {"ep_fsdp": 2, "ep": 2}: ep groups are consecutive ranks {0,1}, {2,3};
// ep_fsdp groups are strided {0,2}, {1,3}.
int mesh_case(std::shared_ptr<glint::Comm> world) {
  const int r = world->rank();
  if (world->size() != 4) return 2;
  try {
    glint::DeviceMesh bad(world, {{"a", 3}, {"b", 1}});
    ++failures;
    std::cout << "MISMATCH mesh 3x1 over 4 ranks was accepted\n";
  } catch (const glint::Error& e) {
    if (std::string(e.what()).find("a=3 x b=1 holds 3 ranks but the world has 4") == std::string::npos) {
      ++failures;
      std::cout << "MISMATCH mesh error: " << e.what() << "\n";
    }
  }
  glint::DeviceMesh mesh(world, {{"ep_fsdp", 2}, {"ep", 2}});
  auto expect_int = [&](const std::string& what, int got, int want) {
    if (got == want) return;
    ++failures;
    std::cout << "MISMATCH " << what << " " << got << " vs " << want << "\n";
  };
  expect_int("ep coordinate", mesh.coordinate("ep"), r % 2);
  expect_int("ep_fsdp coordinate", mesh.coordinate("ep_fsdp"), r / 2);
  expect_int("ep group rank", mesh.axis("ep").rank(), r % 2);
  expect_int("ep_fsdp group rank", mesh.axis("ep_fsdp").rank(), r / 2);
  at::Tensor a = at::full({3}, float(r + 1));
  mesh.axis("ep").all_reduce_sum(a);
  expect_equal("ep all_reduce", a, at::full({3}, r < 2 ? 3.0f : 7.0f));
  at::Tensor b = at::full({3}, float(r + 1));
  mesh.axis("ep_fsdp").all_reduce_sum(b);
  expect_equal("ep_fsdp all_reduce", b, at::full({3}, r % 2 == 0 ? 4.0f : 6.0f));
  // Uneven all-to-all inside the ep group: send r + 1 rows to the peer, 1 to self.
  glint::Comm& ep = mesh.axis("ep");
  int me = ep.rank(), peer = 1 - me;
  std::vector<int64_t> send(2), recv(2);
  send[me] = 1;
  send[peer] = r + 1;
  int peer_world = mesh.axis_ranks("ep")[peer];
  recv[me] = 1;
  recv[peer] = peer_world + 1;
  at::Tensor src = at::full({1 + r + 1, 1}, float(r));
  if (me == 1) src.narrow(0, 0, r + 1).fill_(float(r));  // order: rows to group rank 0 first
  at::Tensor got = ep.all_to_all(src, send, recv);
  at::Tensor want = at::empty({1 + peer_world + 1, 1});
  if (me == 0) {
    want.narrow(0, 0, 1).fill_(float(r));
    want.narrow(0, 1, peer_world + 1).fill_(float(peer_world));
  } else {
    want.narrow(0, 0, peer_world + 1).fill_(float(peer_world));
    want.narrow(0, peer_world + 1, 1).fill_(float(r));
  }
  expect_equal("ep all_to_all", got, want);
  expect_int("ep all_to_all bytes", int(ep.bytes_sent().at("all_to_all")), (r + 1) * 4);
  expect_int("world saw no all_to_all", int(world->bytes_sent().count("all_to_all")), 0);
  world->barrier();
  std::cout << "mesh ok on rank " << r << std::endl;
  return failures ? 1 : 0;
}

// Rank 1 exits in the middle of a collective sequence; the others must fail, not hang.
int die_case(glint::Comm& c) {
  at::Tensor t = at::ones({4});
  c.all_reduce_sum(t);
  if (c.rank() == 1) {
    std::cout << "rank 1 exiting" << std::endl;
    std::_Exit(7);
  }
  for (int i = 0; i < 100; ++i) c.all_reduce_sum(t);
  return 0;
}


// Expert-parallel dispatch on 2 ranks, E = 4 (experts {0,1} on rank 0, {2,3} on rank 1),
// K = 2, 3 tokens per rank; token t of rank r is [10r + t, -(10r + t)]. Routing:
//   rank 0: t0 -> {0,2}, t1 -> {3,0}, t2 -> {2,1}
//   rank 1: t0 -> {1,3}, t1 -> {1,0}, t2 -> {3,1}
// Hand-derived: rank 0 sends [r0t0, r0t1 | r0t2] to itself (experts 0 | 1) and
// [r0t0, r0t2 | r0t1] to rank 1 (experts 2 | 3); rank 1 sends [r1t1 | r1t0, r1t1, r1t2]
// to rank 0 and [ | r1t0, r1t2] to itself. Rank 0 receives
// [r0t0, r0t1, r0t2, r1t1, r1t0, r1t1, r1t2] and groups it by expert as
// e0: [r0t0, r0t1, r1t1], e1: [r0t2, r1t0, r1t1, r1t2] (received rows 0,1,3,2,4,5,6).
// Rank 1 receives [r0t0, r0t2, r0t1, r1t0, r1t2], already grouped: e2: [r0t0, r0t2],
// e3: [r0t1, r1t0, r1t2]. Combine and its gradient are checked against a per-token loop.
int dispatch_case(std::shared_ptr<glint::Comm> c) {
  const int r = c->rank();
  if (c->size() != 2) {
    std::cout << "dispatch case needs 2 ranks\n";
    return 2;
  }
  const int64_t E = 4, K = 2;
  auto token = [](int rank, int t) { return std::vector<float>{float(10 * rank + t), -float(10 * rank + t)}; };
  at::Tensor x = at::empty({3, 2});
  for (int t = 0; t < 3; ++t) x[t] = at::tensor(token(r, t));
  x.requires_grad_(true);
  glint::Routing routing;
  routing.experts = r == 0 ? at::tensor({0, 2, 3, 0, 2, 1}, at::kLong).view({3, 2})
                           : at::tensor({1, 3, 1, 0, 3, 1}, at::kLong).view({3, 2});
  routing.weights = r == 0 ? at::tensor({0.6f, 0.4f, 0.7f, 0.3f, 0.5f, 0.5f}).view({3, 2})
                           : at::tensor({0.9f, 0.1f, 0.2f, 0.8f, 0.35f, 0.65f}).view({3, 2});
  routing.tags = at::tensor({100 * r, 100 * r + 1, 100 * r + 2}, at::kLong);  // travel with their tokens
  glint::AllToAllTokenDispatcher dispatcher(c, E);
  auto d = dispatcher.dispatch(x, routing);
  std::vector<std::pair<int, int>> want_rows;  // (rank, token) per grouped row
  std::vector<int64_t> want_counts, want_perm, want_send, want_recv;
  if (r == 0) {
    want_rows = {{0, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}};
    want_counts = {3, 4};
    want_perm = {0, 1, 3, 2, 4, 5, 6};
    want_send = {3, 3};
    want_recv = {3, 4};
  } else {
    want_rows = {{0, 0}, {0, 2}, {0, 1}, {1, 0}, {1, 2}};
    want_counts = {2, 3};
    want_perm = {0, 1, 2, 3, 4};
    want_send = {4, 2};
    want_recv = {3, 2};
  }
  at::Tensor want_tokens = at::empty({int64_t(want_rows.size()), 2});
  for (size_t i = 0; i < want_rows.size(); ++i)
    want_tokens[i] = at::tensor(token(want_rows[i].first, want_rows[i].second));
  expect_equal("dispatched tokens", d.tokens.detach(), want_tokens);
  std::vector<int64_t> want_tags;
  for (const auto& [rank, t] : want_rows) want_tags.push_back(100 * rank + t);
  expect_equal("dispatched tags", d.tags, at::tensor(want_tags));
  expect_equal("local expert counts", at::tensor(d.counts), at::tensor(want_counts));
  expect_equal("grouped_from_received", d.grouped_from_received, at::tensor(want_perm));
  expect_equal("send splits", at::tensor(d.send_splits), at::tensor(want_send));
  expect_equal("recv splits", at::tensor(d.recv_splits), at::tensor(want_recv));
  // A stand-in expert: expert e scales its rows by (e + 1).
  std::vector<at::Tensor> parts = d.tokens.split_with_sizes(d.counts, 0);
  for (size_t e = 0; e < parts.size(); ++e) parts[e] = parts[e] * double(2 * r + e + 1);
  at::Tensor y = dispatcher.combine(at::cat(parts), d, 3);
  // Per-token loop: y_t = sum_k w_tk (e_tk + 1) x_t; d(sum y * g)/dx_t = sum_k w_tk (e_tk + 1) g.
  at::Tensor g = at::arange(6, at::kFloat).view({3, 2}) + 1;
  at::Tensor want_y = at::zeros({3, 2}), want_grad = at::zeros({3, 2});
  for (int t = 0; t < 3; ++t)
    for (int k = 0; k < K; ++k) {
      double f = routing.weights[t][k].item<double>() * double(routing.experts[t][k].item<int64_t>() + 1);
      want_y[t] += x[t].detach() * f;
      want_grad[t] += g[t] * f;
    }
  check(at::allclose(y.detach(), want_y), "combine", y, want_y);
  (y * g).sum().backward();
  check(at::allclose(x.grad(), want_grad), "gradient through dispatch and combine", x.grad(), want_grad);
  // The local dispatcher on the same rank with all 4 experts agrees where the routing
  // stays local: compare against the loop above on a single rank's tokens.
  glint::LocalTokenDispatcher local(E);
  auto dl = local.dispatch(x.detach(), routing);
  std::vector<at::Tensor> lp = dl.tokens.split_with_sizes(dl.counts, 0);
  for (size_t e = 0; e < lp.size(); ++e) lp[e] = lp[e] * double(e + 1);
  at::Tensor yl = local.combine(at::cat(lp), dl, 3);
  check(at::allclose(yl, want_y), "local dispatcher", yl, want_y);
  std::cout << "dispatch ok on rank " << r << std::endl;
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  glint::restart_with_process_settings(argv);
  if (argc < 2) {
    std::cerr << "usage: glint_dist_worker comm|mesh|die|dispatch\n";
    return 2;
  }
  try {
    auto comm = glint::Comm::create(glint::World::from_env());
    if (std::strcmp(argv[1], "comm") == 0) return comm_case(*comm);
    if (std::strcmp(argv[1], "die") == 0) return die_case(*comm);
    if (std::strcmp(argv[1], "mesh") == 0) return mesh_case(comm);
    if (std::strcmp(argv[1], "dispatch") == 0) return dispatch_case(comm);
    std::cerr << "unknown case " << argv[1] << "\n";
    return 2;
  } catch (const glint::Error& e) {
    std::cerr << "glint: error: " << e.what() << "\n";
    return 1;
  }
}
