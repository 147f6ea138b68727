// unipool host tests: shared helpers.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/units.hpp"
#include "support/valid.hpp"
#include "unipool/host_pool.hpp"

namespace unipool::test {

// Small reservations keep sanitizer builds quick; the size paths are the same.
inline constexpr const char* kTestConf = "reserve=1GiB,huge_threshold=8MiB";

inline std::string conf(const std::string& extra) { return std::string(kTestConf) + "," + extra; }

// Fills a block with a pattern derived from its address and `tag`, so that a
// block handed out twice, or overwritten by the pool, is noticed.
inline void fill(void* p, size_t n, uint8_t tag) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(tag + i * 7);
}
inline bool intact(const void* p, size_t n, uint8_t tag) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != static_cast<uint8_t>(tag + i * 7)) return false;
  }
  return true;
}

// n blocks of `size`, each checked.
inline std::vector<void*> allocate_n(HostPool& pool, size_t n, size_t size) {
  std::vector<void*> blocks;
  for (size_t i = 0; i < n; ++i) {
    void* p = pool.allocate(size);
    EXPECT_NE(p, nullptr) << HostPool::last_error();
    blocks.push_back(p);
  }
  return blocks;
}

}  // namespace unipool::test
