// Runs LLVMFuzzerTestOneInput without libFuzzer: N pseudo-random programs from
// a fixed seed (deterministic, any compiler), or the files given on the
// command line (to replay a crash or a corpus saved by libFuzzer).
//   range_allocator_fuzz_fixed_seed            # N scaled by UNIPOOL_TEST_SCALE
//   range_allocator_fuzz_fixed_seed -n 10000
//   range_allocator_fuzz_fixed_seed crash-1234 corpus/*
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "support/rng.hpp"
#include "support/test_scale.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  uint64_t count = unipool::test::scaled(4000, 50);
  std::vector<const char*> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      count = std::strtoull(argv[++i], nullptr, 10);
    } else {
      files.push_back(argv[i]);
    }
  }

  if (!files.empty()) {
    for (const char* path : files) {
      std::ifstream f(path, std::ios::binary);
      if (!f) {
        std::fprintf(stderr, "cannot read %s\n", path);
        return 2;
      }
      const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("ran %zu input files\n", files.size());
    return 0;
  }

  unipool::test::Rng rng(0x5EED'0F'FA11'0C);
  std::vector<uint8_t> input;
  uint64_t total = 0;
  for (uint64_t i = 0; i < count; ++i) {
    // Mostly short programs, some long ones; the empty input too.
    const uint64_t length = i == 0 ? 0 : rng.chance(0.9) ? rng.between(1, 600) : rng.between(600, 8192);
    input.resize(length);
    for (auto& b : input) b = static_cast<uint8_t>(rng.next());
    // Bias a share of the programs towards one kind of operation, so that
    // long uniform streams and long free bursts occur too.
    if (length > 6 && rng.chance(0.3)) {
      const uint8_t favourite = static_cast<uint8_t>(rng.below(16));
      for (size_t k = 6; k < input.size(); k += 1 + rng.below(4)) input[k] = favourite;
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
    total += length;
  }
  std::printf("ran %llu pseudo-random programs (%llu bytes), no disagreement\n",
              static_cast<unsigned long long>(count), static_cast<unsigned long long>(total));
  return 0;
}
