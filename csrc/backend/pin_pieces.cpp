#include "backend/pin_pieces.hpp"

namespace unipool::backend {

PinProgress pin_pieces(HostPinner& pinner, char* base, uint64_t bytes, uint64_t piece) noexcept {
  PinProgress progress;
  while (progress.pinned_bytes < bytes) {
    const uint64_t left = bytes - progress.pinned_bytes;
    const uint64_t n = left < piece ? left : piece;
    const BackendStatus st = pinner.pin(base + progress.pinned_bytes, n);
    if (!st.is_ok()) {
      progress.failure = st;
      break;
    }
    progress.pinned_bytes += n;
    ++progress.registrations;
  }
  return progress;
}

void unpin_pieces(HostPinner& pinner, char* base, uint64_t bytes, uint64_t piece) noexcept {
  for (uint64_t off = 0; off < bytes; off += piece) pinner.unpin(base + off);
}

}  // namespace unipool::backend
