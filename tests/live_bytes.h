// Test helper: the bytes allocated on this thread while it lives (through the allocators'
// reports, compat::observe_allocations), and their peak.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <thread>

#include "core/compat.h"

namespace glint::testing {

class LiveBytes {
 public:
  LiveBytes() : owner_(std::this_thread::get_id()) {
    handle_ = compat::observe_allocations([this](void*, int64_t bytes) {
      if (std::this_thread::get_id() != owner_) return;
      live_ += bytes;
      peak_ = std::max(peak_, live_);
    });
  }
  int64_t peak() const { return peak_; }
  double peak_mb() const { return double(peak_) / (1 << 20); }

 private:
  std::thread::id owner_;
  int64_t live_ = 0, peak_ = 0;
  std::shared_ptr<void> handle_;
};

}  // namespace glint::testing
