// unipool device pool: blocks freed while other streams may still use them.
//
// One FIFO per stream of (fence, block): fences on one stream complete in
// order, so polling stops at the first incomplete one of each queue and an
// allocation that finds nothing pending pays one branch.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "unipool/fence.hpp"

namespace unipool::device {

struct PendingFree {
  FenceId fence;   // kNoFence: recording failed; retried at the next poll
  uint32_t block;
};

struct PendingQueue {
  StreamHandle stream;
  std::deque<PendingFree> entries;
};

class PendingFrees {
 public:
  void push(StreamHandle stream, FenceId fence, uint32_t block) {
    queue_for(stream).entries.push_back(PendingFree{fence, block});
    ++total_;
  }
  uint64_t total() const noexcept { return total_; }
  std::vector<PendingQueue>& queues() noexcept { return queues_; }
  const std::vector<PendingQueue>& queues() const noexcept { return queues_; }
  void popped() noexcept { --total_; }

 private:
  PendingQueue& queue_for(StreamHandle stream) {
    for (PendingQueue& q : queues_) {
      if (q.stream == stream) return q;
    }
    queues_.push_back(PendingQueue{stream, {}});
    return queues_.back();
  }

  std::vector<PendingQueue> queues_;
  uint64_t total_ = 0;
};

}  // namespace unipool::device
