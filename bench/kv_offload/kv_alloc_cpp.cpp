// bench/kv_offload: alloc/free cost per block of unipool::KVBlockPool from
// C++, in batches of `batch` blocks. Prints one JSON object (kv_offload.py
// reads it).   kv_alloc_cpp [batch=64] [iterations=2000000] [num_blocks=4096]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "unipool/kv_block_pool.hpp"

int main(int argc, char** argv) {
  const size_t batch = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64;
  const long iterations = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 2000000;
  const uint64_t num_blocks = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 4096;
  unipool::KVBlockPoolOptions o;
  o.block_bytes = 4096;  // the cost does not depend on the block size
  o.num_blocks = num_blocks;
  o.pinned = unipool::HostPinned::off;
  unipool::KVBlockPool pool(o);
  std::vector<int64_t> ids(batch);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i) {
    if (pool.alloc(batch, ids.data()) != unipool::Status::ok) return 1;
    if (pool.free(ids.data(), batch) != unipool::Status::ok) return 1;
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"batch\": %zu, \"iterations\": %ld, \"ns_per_batch\": %.2f, \"ns_per_block\": %.3f}\n", batch,
              iterations, ns / static_cast<double>(iterations), ns / static_cast<double>(iterations * batch));
  return pool.validate() ? 0 : 1;
}
