// unipool backend: registering a range with the pinner in pieces.
//
// A pool pins its memory in pieces of at most max_pin bytes: one huge
// cudaHostRegister is slow and all-or-nothing, and a registration can only
// be undone whole. The pieces of a range are a function of (base, bytes,
// piece) alone, so the code that pins and the code that unpins agree on
// them without keeping a list. The arenas, the huge blocks and the KV arena
// all pin through here; what a failure means (undo, serve pageable, stop)
// stays theirs.
#pragma once

#include <cstdint>

#include "backend/host_pinner.hpp"

namespace unipool::backend {

// The size of every piece but the last: max_piece rounded down to a whole
// number of `unit`s (a page, an arena chunk), at least one unit.
inline uint64_t pin_piece_bytes(uint64_t max_piece, uint64_t unit) noexcept {
  return (max_piece / unit > 0 ? max_piece / unit : 1) * unit;
}

struct PinProgress {
  uint64_t pinned_bytes = 0;                         // from base: a whole number of pieces
  uint64_t registrations = 0;                        // pieces pinned
  BackendStatus failure = BackendStatus::success();  // of the piece that failed, if one did
};

// Pins [base, base + bytes) piece by piece, first to last, and stops at the
// first piece that fails; the pieces before it stay pinned.
// An exception from the pinner passes through (the KV arena's constructor
// undoes what was pinned and rethrows).
PinProgress pin_pieces(HostPinner& pinner, char* base, uint64_t bytes, uint64_t piece);

// Unpins the pieces of [base, base + bytes) that pin_pieces() pinned (bytes:
// its pinned_bytes, or the whole range).
void unpin_pieces(HostPinner& pinner, char* base, uint64_t bytes, uint64_t piece) noexcept;

}  // namespace unipool::backend
