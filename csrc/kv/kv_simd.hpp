// unipool kv: the two loops over every id of a hot batch, writing a run of
// consecutive ids (alloc of a whole free word) and testing that ids are one
// (free of such a batch). Built for AVX2 as well as for baseline x86-64
// (whose vectors hold 2 ids, AVX2's 4) and picked once by what the CPU has,
// since the library is built for baseline x86-64. Other CPUs: plain loops.
#pragma once

#include <cstddef>
#include <cstdint>

namespace unipool::kv {

enum class SimdLevel { base, avx2, avx512 };

// The loops in use: the best the CPU has, picked at load time.
SimdLevel simd_level() noexcept;
// For tests, which run every variant: false (and no change) if the CPU lacks
// it. Not thread-safe: call before any pool is in use.
bool use_simd_level(SimdLevel level) noexcept;

// out[k] = first + k for k < n.
template <class Id>
void write_run(Id* out, uint64_t first, size_t n) noexcept;

// Whether ids[k] == first + k for every k < n (no early exit).
template <class Id>
bool all_in_run(const Id* ids, uint64_t first, size_t n) noexcept;

}  // namespace unipool::kv
