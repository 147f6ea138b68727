// unipool kv: write_run and all_in_run (kv_simd.hpp) for baseline x86-64,
// AVX2 and AVX-512, picked once by what the CPU has.
//
// Why hand-written vectors: a batch of 64 int64 ids is 512 bytes, and the
// compiler's loops for "out[k] = first + k" and "ids[k] == first + k" carry
// one index vector from iteration to iteration, four ids at a time, with the
// loop control between: ~7 instructions per 4 ids, twice the cost of the
// stores or loads themselves, and the largest single part of a hot
// free_and_alloc (one lock, 64 ids read, 64 written). Here each loop keeps
// several index vectors in flight, steps them by a constant, and folds the
// loads into the subtractions; AVX-512 holds 8 int64 (16 int32) per register
// and masks the tail.
#include "kv/kv_simd.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define UNIPOOL_KV_X86 1
// The helpers below pass vectors by value between functions built for the
// same target and always inlined; no call crosses the baseline ABI.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace unipool::kv {
namespace {

template <class Id>
void write_run_base(Id* out, uint64_t first, size_t n) noexcept {
  for (size_t k = 0; k < n; ++k) out[k] = static_cast<Id>(first + k);
}

template <class Id>
bool all_in_run_base(const Id* ids, uint64_t first, size_t n) noexcept {
  uint64_t differs = 0;
  for (size_t k = 0; k < n; ++k) differs |= static_cast<uint64_t>(ids[k]) - first - k;
  return differs == 0;
}

#ifdef UNIPOOL_KV_X86

// The ids of a run as they sit in memory: int64 keeps them whole; int32 and
// uint32 keep the low 32 bits, so a run is compared and written modulo 2^32
// (a pool has fewer than 2^31 blocks, so the ids fit).
template <class Id>
constexpr bool kWide = sizeof(Id) == 8;

// ---- AVX2: 4 int64 or 8 int32 per register, four registers per round.

template <class Id>
__attribute__((target("avx2"), always_inline)) inline __m256i iota_avx2(uint64_t first) {
  if constexpr (kWide<Id>) return _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(first)), _mm256_setr_epi64x(0, 1, 2, 3));
  return _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <class Id>
__attribute__((target("avx2"), always_inline)) inline __m256i add_avx2(__m256i a, uint64_t k) {
  if constexpr (kWide<Id>) return _mm256_add_epi64(a, _mm256_set1_epi64x(static_cast<long long>(k)));
  return _mm256_add_epi32(a, _mm256_set1_epi32(static_cast<int>(k)));
}

template <class Id>
__attribute__((target("avx2"))) void write_run_avx2(Id* out, uint64_t first, size_t n) noexcept {
  constexpr size_t lanes = 32 / sizeof(Id);
  __m256i v0 = iota_avx2<Id>(first), v1 = add_avx2<Id>(v0, lanes), v2 = add_avx2<Id>(v0, 2 * lanes),
          v3 = add_avx2<Id>(v0, 3 * lanes);
  size_t k = 0;
  for (; k + 4 * lanes <= n; k += 4 * lanes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), v0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k + lanes), v1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k + 2 * lanes), v2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k + 3 * lanes), v3);
    v0 = add_avx2<Id>(v0, 4 * lanes);
    v1 = add_avx2<Id>(v1, 4 * lanes);
    v2 = add_avx2<Id>(v2, 4 * lanes);
    v3 = add_avx2<Id>(v3, 4 * lanes);
  }
  write_run_base(out + k, first + k, n - k);
}

template <class Id>
__attribute__((target("avx2"))) bool all_in_run_avx2(const Id* ids, uint64_t first, size_t n) noexcept {
  constexpr size_t lanes = 32 / sizeof(Id);
  __m256i v0 = iota_avx2<Id>(first), v1 = add_avx2<Id>(v0, lanes), v2 = add_avx2<Id>(v0, 2 * lanes),
          v3 = add_avx2<Id>(v0, 3 * lanes);
  __m256i d0 = _mm256_setzero_si256(), d1 = d0;
  size_t k = 0;
  for (; k + 4 * lanes <= n; k += 4 * lanes) {
    const auto* at = reinterpret_cast<const __m256i*>(ids + k);
    d0 = _mm256_or_si256(d0, _mm256_xor_si256(_mm256_loadu_si256(at), v0));
    d1 = _mm256_or_si256(d1, _mm256_xor_si256(_mm256_loadu_si256(at + 1), v1));
    d0 = _mm256_or_si256(d0, _mm256_xor_si256(_mm256_loadu_si256(at + 2), v2));
    d1 = _mm256_or_si256(d1, _mm256_xor_si256(_mm256_loadu_si256(at + 3), v3));
    v0 = add_avx2<Id>(v0, 4 * lanes);
    v1 = add_avx2<Id>(v1, 4 * lanes);
    v2 = add_avx2<Id>(v2, 4 * lanes);
    v3 = add_avx2<Id>(v3, 4 * lanes);
  }
  const __m256i d = _mm256_or_si256(d0, d1);
  return _mm256_testz_si256(d, d) && all_in_run_base(ids + k, first + k, n - k);
}

// ---- AVX-512: 8 int64 or 16 int32 per register, two registers per round,
// the tail under a mask.

template <class Id>
__attribute__((target("avx512f"), always_inline)) inline __m512i iota_avx512(uint64_t first) {
  if constexpr (kWide<Id>) {
    return _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(first)), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  }
  return _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)),
                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

template <class Id>
__attribute__((target("avx512f"), always_inline)) inline __m512i add_avx512(__m512i a, uint64_t k) {
  if constexpr (kWide<Id>) return _mm512_add_epi64(a, _mm512_set1_epi64(static_cast<long long>(k)));
  return _mm512_add_epi32(a, _mm512_set1_epi32(static_cast<int>(k)));
}

// The first `count` lanes (count < lanes) of a register of Id.
template <class Id>
__attribute__((target("avx512f"))) void store_first(Id* out, __m512i v, size_t count) {
  if constexpr (kWide<Id>) {
    _mm512_mask_storeu_epi64(out, static_cast<__mmask8>((1u << count) - 1), v);
  } else {
    _mm512_mask_storeu_epi32(out, static_cast<__mmask16>((1u << count) - 1), v);
  }
}

// Whether the first `count` lanes (count < lanes) at `ids` differ from v's.
template <class Id>
__attribute__((target("avx512f"))) bool first_differ(const Id* ids, __m512i v, size_t count) {
  if constexpr (kWide<Id>) {
    const auto m = static_cast<__mmask8>((1u << count) - 1);
    return _mm512_mask_cmpneq_epi64_mask(m, _mm512_maskz_loadu_epi64(m, ids), v) != 0;
  } else {
    const auto m = static_cast<__mmask16>((1u << count) - 1);
    return _mm512_mask_cmpneq_epi32_mask(m, _mm512_maskz_loadu_epi32(m, ids), v) != 0;
  }
}

template <class Id>
__attribute__((target("avx512f"))) void write_run_avx512(Id* out, uint64_t first, size_t n) noexcept {
  constexpr size_t lanes = 64 / sizeof(Id);
  __m512i v0 = iota_avx512<Id>(first), v1 = add_avx512<Id>(v0, lanes);
  size_t k = 0;
  for (; k + 2 * lanes <= n; k += 2 * lanes) {
    _mm512_storeu_si512(out + k, v0);
    _mm512_storeu_si512(out + k + lanes, v1);
    v0 = add_avx512<Id>(v0, 2 * lanes);
    v1 = add_avx512<Id>(v1, 2 * lanes);
  }
  if (k + lanes <= n) {
    _mm512_storeu_si512(out + k, v0);
    k += lanes;
    v0 = v1;
  }
  if (k < n) store_first(out + k, v0, n - k);
}

template <class Id>
__attribute__((target("avx512f"))) bool all_in_run_avx512(const Id* ids, uint64_t first, size_t n) noexcept {
  constexpr size_t lanes = 64 / sizeof(Id);
  __m512i v0 = iota_avx512<Id>(first), v1 = add_avx512<Id>(v0, lanes);
  __m512i d0 = _mm512_setzero_si512(), d1 = d0;
  size_t k = 0;
  for (; k + 2 * lanes <= n; k += 2 * lanes) {
    d0 = _mm512_or_si512(d0, _mm512_xor_si512(_mm512_loadu_si512(ids + k), v0));
    d1 = _mm512_or_si512(d1, _mm512_xor_si512(_mm512_loadu_si512(ids + k + lanes), v1));
    v0 = add_avx512<Id>(v0, 2 * lanes);
    v1 = add_avx512<Id>(v1, 2 * lanes);
  }
  if (k + lanes <= n) {
    d0 = _mm512_or_si512(d0, _mm512_xor_si512(_mm512_loadu_si512(ids + k), v0));
    k += lanes;
    v0 = v1;
  }
  const bool whole_ok = _mm512_test_epi64_mask(_mm512_or_si512(d0, d1), _mm512_or_si512(d0, d1)) == 0;
  return whole_ok && (k == n || !first_differ(ids + k, v0, n - k));
}

bool cpu_has(SimdLevel level) {
  __builtin_cpu_init();
  return level == SimdLevel::base || (level == SimdLevel::avx2 && __builtin_cpu_supports("avx2")) ||
         (level == SimdLevel::avx512 && __builtin_cpu_supports("avx512f"));
}

// Set once at load time; a pool used from an earlier static initializer
// takes the baseline loops, which are as correct.
SimdLevel g_level = cpu_has(SimdLevel::avx512) ? SimdLevel::avx512
                    : cpu_has(SimdLevel::avx2) ? SimdLevel::avx2
                                               : SimdLevel::base;

#else
bool cpu_has(SimdLevel level) { return level == SimdLevel::base; }
SimdLevel g_level = SimdLevel::base;
#endif  // UNIPOOL_KV_X86

}  // namespace

SimdLevel simd_level() noexcept { return g_level; }

bool use_simd_level(SimdLevel level) noexcept {
  if (!cpu_has(level)) return false;
  g_level = level;
  return true;
}

template <class Id>
void write_run(Id* out, uint64_t first, size_t n) noexcept {
#ifdef UNIPOOL_KV_X86
  if (g_level == SimdLevel::avx512) return write_run_avx512(out, first, n);
  if (g_level == SimdLevel::avx2) return write_run_avx2(out, first, n);
#endif
  write_run_base(out, first, n);
}

template <class Id>
bool all_in_run(const Id* ids, uint64_t first, size_t n) noexcept {
#ifdef UNIPOOL_KV_X86
  if (g_level == SimdLevel::avx512) return all_in_run_avx512(ids, first, n);
  if (g_level == SimdLevel::avx2) return all_in_run_avx2(ids, first, n);
#endif
  return all_in_run_base(ids, first, n);
}

template void write_run<int64_t>(int64_t*, uint64_t, size_t) noexcept;
template void write_run<int32_t>(int32_t*, uint64_t, size_t) noexcept;
template void write_run<uint32_t>(uint32_t*, uint64_t, size_t) noexcept;
template bool all_in_run<int64_t>(const int64_t*, uint64_t, size_t) noexcept;
template bool all_in_run<int32_t>(const int32_t*, uint64_t, size_t) noexcept;
template bool all_in_run<uint32_t>(const uint32_t*, uint64_t, size_t) noexcept;

}  // namespace unipool::kv
