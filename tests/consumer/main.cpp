// Uses the installed headers and library: prints what it did, fails loudly.
#include <cstdio>
#include <cstdlib>

#include <unipool/build_info.hpp>
#include <unipool/range_allocator.hpp>

int main() {
  unipool::RangeAllocator ranges(uint64_t{1} << 30, {.alignment = 256});
  const unipool::RangeAllocation a = ranges.allocate(1000);
  const unipool::RangeAllocation b = ranges.allocate(3000);
  if (!a || !b || b.offset != 1024 || ranges.deallocate(a) != unipool::Status::ok ||
      ranges.deallocate(a) != unipool::Status::not_live || !ranges.validate()) {
    std::fprintf(stderr, "consumer: unexpected allocator behaviour\n");
    return EXIT_FAILURE;
  }
  const unipool::BuildInfo info = unipool::build_info();
  std::printf("consumer ok: unipool %s, cuda=%d (runtime %d), used=%llu\n", info.version,
              int{info.cuda}, info.cuda_runtime_version,
              static_cast<unsigned long long>(ranges.used_bytes()));
  return EXIT_SUCCESS;
}
