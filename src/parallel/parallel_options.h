// How a model is laid over the ranks, as options: what parallelize()
// (parallel/parallelize.h) applies. No libtorch here.
#pragma once

#include <cstdint>
#include <string>

namespace glint {

struct ParallelOptions {
  int64_t ep = 1;                        // experts sharded over ep ranks
  std::string ep_layout = "contiguous";  // EP groups: "contiguous" ranks or "strided"
  bool fsdp = false;                     // shard decoder layers (ZeRO-3; recomputes each layer)
  bool recompute = false;                // recompute each decoder layer in backward
                                         // (--activation-checkpointing)
  // FSDP: prefetch and asynchronous reduce-scatter: "on", "off", or "auto" (on for a GPU).
  std::string fsdp_overlap = "auto";
};

}  // namespace glint
