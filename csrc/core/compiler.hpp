// unipool: compiler hints, kept in one place.
#pragma once

// For the small steps of a hot path that the compiler would otherwise keep
// out of line (each call boundary costs more than the step itself).
#if defined(__GNUC__) || defined(__clang__)
#define UNIPOOL_ALWAYS_INLINE [[gnu::always_inline]] inline
#define UNIPOOL_LIKELY(x) __builtin_expect(!!(x), 1)
#define UNIPOOL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define UNIPOOL_ALWAYS_INLINE inline
#define UNIPOOL_LIKELY(x) (x)
#define UNIPOOL_UNLIKELY(x) (x)
#endif
