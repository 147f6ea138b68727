// unipool kv: pinning a KV arena (a KVBlockPool's, or one process's mapping
// of a SharedKVBlockPool) in pieces of at most max_pin bytes, as the
// options ask: off, on (all or an exception), or best effort.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/host_pinner.hpp"
#include "unipool/host_config.hpp"

namespace unipool {

class KVPinning {
 public:
  // Pins [base, base + bytes). Throws std::runtime_error, naming `who`, when
  // `mode` is on and the arena cannot be pinned whole; the pieces pinned
  // before a failure stay pinned (unpin() undoes them).
  void pin(char* base, uint64_t bytes, HostPinned mode, uint64_t max_pin, const char* who);
  // Undoes pin(); base as given to it.
  void unpin(char* base) noexcept;

  uint64_t pinned_bytes() const noexcept { return pinned_bytes_; }
  PinningState state() const noexcept { return state_; }

 private:
  std::unique_ptr<backend::HostPinner> pinner_;
  uint64_t piece_ = 0;         // max_pin: the first pinned_bytes_ are pinned in pieces of it
  uint64_t pinned_bytes_ = 0;  // what unpin() undoes
  PinningState state_ = PinningState::pageable;
};

}  // namespace unipool
