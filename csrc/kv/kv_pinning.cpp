// unipool kv: KVPinning.
#include "kv/kv_pinning.hpp"

#include <stdexcept>
#include <string>

#include "backend/pin_pieces.hpp"

namespace unipool {

void KVPinning::pin(char* base, uint64_t bytes, HostPinned mode, uint64_t max_pin, const char* who) {
  if (mode == HostPinned::off) {
    state_ = PinningState::pageable;
    return;
  }
  pinner_ = backend::make_default_host_pinner();
  if (!pinner_->available()) {
    if (mode == HostPinned::on) {
      throw std::runtime_error(std::string(who) +
                               ": pinned=on but no CUDA device can pin host memory (pinner: " + pinner_->name() + ")");
    }
    state_ = PinningState::pageable_no_gpu;
    return;
  }
  piece_ = max_pin;
  const backend::PinProgress p = backend::pin_pieces(*pinner_, base, bytes, piece_);
  pinned_bytes_ = p.pinned_bytes;
  if (p.pinned_bytes == bytes) {
    state_ = PinningState::pinned;
  } else if (mode == HostPinned::on) {
    throw std::runtime_error(std::string(who) + ": pinning the arena failed: " + p.failure.message);
  } else {
    state_ = PinningState::partially_pinned;  // the pieces before the failure stay pinned
  }
}

void KVPinning::unpin(char* base) noexcept {
  if (pinned_bytes_ != 0) backend::unpin_pieces(*pinner_, base, pinned_bytes_, piece_);
  pinned_bytes_ = 0;
}

}  // namespace unipool
