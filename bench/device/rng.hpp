// bench/device: the tests' deterministic generator (SplitMix64), so a seed
// gives the same trace with every standard library.
#pragma once

#include "support/rng.hpp"

namespace device_bench {
using Rng = unipool::test::Rng;
}  // namespace device_bench
