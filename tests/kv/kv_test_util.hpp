// unipool kv tests: a small pageable pool and a validate() assertion.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "unipool/kv_block_pool.hpp"

namespace unipool::test {

inline KVBlockPoolOptions small_kv_options(uint64_t block_bytes = 4096, uint64_t num_blocks = 64) {
  KVBlockPoolOptions o;
  o.block_bytes = block_bytes;
  o.num_blocks = num_blocks;
  o.pinned = HostPinned::off;
  return o;
}

inline void expect_valid(const KVBlockPool& pool) {
  std::string why;
  EXPECT_TRUE(pool.validate(&why)) << why;
}

}  // namespace unipool::test
