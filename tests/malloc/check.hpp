// tests/malloc: a check that works in programs run under LD_PRELOAD (no
// gtest: the programs must behave the same with and without the face).
#pragma once

#include <cstdio>
#include <cstdlib>

#define MALLOC_CHECK(cond)                                                               \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)
