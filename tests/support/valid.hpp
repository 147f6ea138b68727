// unipool tests: EXPECT_VALID / ASSERT_VALID for anything with
// validate(std::string* why): range allocators, host, device and KV pools.
// The failure message carries the broken invariant.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace unipool::test {

template <class Pool>
::testing::AssertionResult Valid(const Pool& pool) {
  std::string why;
  if (pool.validate(&why)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "validate() failed: " << why;
}

}  // namespace unipool::test

#define EXPECT_VALID(pool) EXPECT_TRUE(::unipool::test::Valid(pool))
#define ASSERT_VALID(pool) ASSERT_TRUE(::unipool::test::Valid(pool))
