// unipool core: the helpers every layer shares (csrc/core/align.hpp,
// number_text.hpp, assert.hpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/align.hpp"
#include "core/assert.hpp"
#include "core/number_text.hpp"

namespace unipool {
namespace {

TEST(CoreAlign, RoundsToMultiplesAndPowersOfTwo) {
  EXPECT_EQ(round_up(0, 3), 0u);
  EXPECT_EQ(round_up(7, 3), 9u);
  EXPECT_EQ(round_up(9, 3), 9u);
  EXPECT_EQ(round_up(uint64_t{5} << 20, uint64_t{3} << 20), uint64_t{6} << 20);  // chunks need not be powers of two
  EXPECT_EQ(align_up(1, 4096), 4096u);
  EXPECT_EQ(align_up(4096, 4096), 4096u);
  EXPECT_EQ(align_down(8191, 4096), 4096u);
  EXPECT_TRUE(is_power_of_two(1));
  EXPECT_TRUE(is_power_of_two(uint64_t{1} << 63));
  EXPECT_FALSE(is_power_of_two(0));
  EXPECT_FALSE(is_power_of_two(24));
}

TEST(CoreNumberText, HexAndDecimalWithoutLeadingZeros) {
  EXPECT_STREQ(to_hex(0).text, "0x0");
  EXPECT_STREQ(to_hex(0x7f1c8d4100c0).text, "0x7f1c8d4100c0");
  EXPECT_STREQ(to_hex(UINT64_MAX).text, "0xffffffffffffffff");
  EXPECT_STREQ(to_dec(0).text, "0");
  EXPECT_STREQ(to_dec(4096).text, "4096");
  EXPECT_STREQ(to_dec(UINT64_MAX).text, "18446744073709551615");
  EXPECT_EQ(hex_string(255), "0xff");
}

#ifndef NDEBUG
TEST(CoreAssertDeathTest, AFailedPreconditionNamesItselfAndAborts) {
  const int ok = 1;
  UNIPOOL_ASSERT(ok == 1, "holds: nothing happens");
  EXPECT_DEATH(UNIPOOL_ASSERT(ok == 2, "the caller holds the lock"),
               "unipool: assertion failed: ok == 2 \\(the caller holds the lock\\) at .*core_helpers_test.cpp:[0-9]+");
}
#else
TEST(CoreAssertDeathTest, CompiledOutOfReleaseBuilds) {
  int evaluated = 0;
  UNIPOOL_ASSERT(++evaluated == 5, "never evaluated");
  EXPECT_EQ(evaluated, 0);  // the condition is not even evaluated
}
#endif

}  // namespace
}  // namespace unipool
