#include "backend/pin_pieces.hpp"

#include "core/assert.hpp"

namespace unipool::backend {

PinProgress pin_pieces(HostPinner& pinner, char* base, uint64_t bytes, uint64_t piece) {
  UNIPOOL_ASSERT(piece > 0, "pieces of at least one byte");
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
  UNIPOOL_ASSERT(piece > 0, "pieces of at least one byte");
  for (uint64_t off = 0; off < bytes; off += piece) pinner.unpin(base + off);
}

}  // namespace unipool::backend
