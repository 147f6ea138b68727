// unipool kv: the two loops over every id of a hot batch, writing a run of
// consecutive ids (alloc of a whole free word) and testing that ids are one
// (free of such a batch). Built for AVX2 as well as for baseline x86-64
// (whose vectors hold 2 ids, AVX2's 4) and picked once by what the CPU has,
// since the library is built for baseline x86-64. Other CPUs: plain loops.
#pragma once

#include <cstddef>
#include <cstdint>

namespace unipool::kv {

// out[k] = first + k for k < n.
template <class Id>
void write_run(Id* out, uint64_t first, size_t n) noexcept;

// Whether ids[k] == first + k for every k < n (no early exit).
template <class Id>
bool all_in_run(const Id* ids, uint64_t first, size_t n) noexcept;

}  // namespace unipool::kv
