// Comm: the collectives glint uses, over a c10d process group (Gloo on CPU), with the
// bytes each rank sends counted per operation kind.
//
// Contract for every collective: all ranks of the group call it in the same order with
// tensors of the same dtype (and the documented shapes); it blocks until done and throws
// glint::Error (naming this rank) on a failure or after the distributed timeout.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/world.h"

namespace glint {

// A collective started and not yet waited for (Comm::start_*).
class PendingCollective {
 public:
  // One dropped unwaited waits for its collective (errors then go unreported).
  virtual ~PendingCollective() = default;
  // Blocks until the collective is done (with NCCL: until the current CUDA stream waits
  // for it) and returns its result. Once only. Throws as the blocking form does.
  virtual at::Tensor wait() = 0;
};

// A result that was there from the start (a group of one, a blocking fallback).
class ReadyCollective : public PendingCollective {
 public:
  explicit ReadyCollective(at::Tensor result) : result_(std::move(result)) {}
  at::Tensor wait() override { return std::move(result_); }

 private:
  at::Tensor result_;
};

class Liveness;

class Comm {
 public:
  virtual ~Comm() = default;

  // Rendezvous through a TCPStore at world.master_addr:master_port (rank 0 hosts it)
  // and a process group over all ranks: Gloo for CPU tensors; NCCL when `device` is a GPU
  // (native all-gather-into-tensor, reduce-scatter-tensor, all-to-all-single; tensors
  // given on the CPU are moved to the device and back). A single-process world needs no
  // network. A distributed world also starts this rank's heartbeat (dist/liveness.h), so
  // that a failed collective names the ranks and nodes that were lost.
  static std::shared_ptr<Comm> create(const World& world, const c10::Device& device = c10::Device(c10::kCPU));

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: t = sum over ranks of t. Returns on every rank.
  virtual void all_reduce_sum(at::Tensor& t) = 0;
  // Every rank's t [n, ...] concatenated in rank order along dim 0: [size * n, ...].
  virtual at::Tensor all_gather(const at::Tensor& t) = 0;
  // t [size * n, ...] on every rank -> [n, ...]: chunk r of the sum over ranks on rank r.
  virtual at::Tensor reduce_scatter_sum(const at::Tensor& t) = 0;
  // all_gather and reduce_scatter_sum started without waiting, so that communication
  // overlaps compute: the result comes from wait(). Several may be in flight, with other
  // collectives on the group between; every rank starts them in the same order.
  virtual std::unique_ptr<PendingCollective> start_all_gather(const at::Tensor& t);
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const at::Tensor& t);
  // Uneven all-to-all along dim 0: rows [sum(send[:j]), +send[j]) go to rank j; the
  // result holds recv[i] rows from each rank i, in rank order. send/recv: [size].
  virtual at::Tensor all_to_all(const at::Tensor& t, const std::vector<int64_t>& send_counts,
                                const std::vector<int64_t>& recv_counts) = 0;
  // In place: every rank gets root's t.
  virtual void broadcast(at::Tensor& t, int root) = 0;
  // On root: every rank's t [n, ...] concatenated in rank order; elsewhere: undefined.
  virtual at::Tensor gather(const at::Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  // Every rank calls it; every rank returns root's `text` (at most 64 KiB).
  std::string broadcast_text(const std::string& text, int root);

  // A communicator over `ranks` (ranks of this group, ascending, including this rank's).
  // Every rank in `ranks` must call it with the same arguments; ranks outside do not.
  // `tag` names the group so that groups over the same ranks stay distinct.
  virtual std::shared_ptr<Comm> subgroup(const std::vector<int>& ranks, const std::string& tag) = 0;

  // Bytes this rank has sent, by operation ("all_reduce", "all_gather", ...).
  const std::map<std::string, uint64_t>& bytes_sent() const { return bytes_; }
  uint64_t total_bytes_sent() const;

 protected:
  void count(const std::string& op, uint64_t bytes) { bytes_[op] += bytes; }

 private:
  std::map<std::string, uint64_t> bytes_;
  std::shared_ptr<Liveness> liveness_;  // the job's heartbeat, on the world Comm of a distributed job
};

// Every rank of `comm` calls it: runs `f` here, then learns whether `f` succeeded on every
// rank. When it threw anywhere, every rank throws glint::Error with the message of the
// lowest failing rank (prefixed with "rank R: " on the ranks where it did not fail), so a
// rank's failure (a full disk, a bad file) ends all of them at once instead of leaving
// them waiting in the next collective.
void run_collectively(Comm& comm, const std::function<void()>& f);

}  // namespace glint
