// unipool kv: write_run and all_in_run (kv_simd.hpp), baseline and AVX2.
#include "kv/kv_simd.hpp"

namespace unipool::kv {
namespace {

// The same loops twice: the compiler vectorizes each for its target.
#define UNIPOOL_KV_LOOPS(suffix, attributes)                                              \
  template <class Id>                                                                      \
  attributes void write_run_##suffix(Id* out, uint64_t first, size_t n) noexcept {         \
    for (size_t k = 0; k < n; ++k) out[k] = static_cast<Id>(first + k);                    \
  }                                                                                        \
  template <class Id>                                                                      \
  attributes bool all_in_run_##suffix(const Id* ids, uint64_t first, size_t n) noexcept {  \
    uint64_t differs = 0;                                                                  \
    for (size_t k = 0; k < n; ++k) differs |= static_cast<uint64_t>(ids[k]) - first - k;   \
    return differs == 0;                                                                   \
  }

UNIPOOL_KV_LOOPS(base, )
#if defined(__x86_64__) && defined(__GNUC__)
UNIPOOL_KV_LOOPS(avx2, __attribute__((target("avx2"))))
// Read once at load time; a pool used from an earlier static initializer
// takes the baseline loops, which are as correct.
const bool g_avx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();
#else
constexpr bool g_avx2 = false;
#define write_run_avx2 write_run_base
#define all_in_run_avx2 all_in_run_base
#endif
#undef UNIPOOL_KV_LOOPS

}  // namespace

template <class Id>
void write_run(Id* out, uint64_t first, size_t n) noexcept {
  g_avx2 ? write_run_avx2(out, first, n) : write_run_base(out, first, n);
}

template <class Id>
bool all_in_run(const Id* ids, uint64_t first, size_t n) noexcept {
  return g_avx2 ? all_in_run_avx2(ids, first, n) : all_in_run_base(ids, first, n);
}

template void write_run<int64_t>(int64_t*, uint64_t, size_t) noexcept;
template void write_run<int32_t>(int32_t*, uint64_t, size_t) noexcept;
template void write_run<uint32_t>(uint32_t*, uint64_t, size_t) noexcept;
template bool all_in_run<int64_t>(const int64_t*, uint64_t, size_t) noexcept;
template bool all_in_run<int32_t>(const int32_t*, uint64_t, size_t) noexcept;
template bool all_in_run<uint32_t>(const uint32_t*, uint64_t, size_t) noexcept;

}  // namespace unipool::kv
