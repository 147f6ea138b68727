// bench/kv_offload: alloc/free cost of unipool::KVBlockPool from C++, in
// batches of `batch` blocks. Prints one JSON object (kv_offload.py reads it).
//   kv_alloc_cpp [batch=64] [iterations=2000000] [num_blocks=4096]
//
// Cases (each: the best of 25 timed runs of iterations / 5 batches, ns per
// batch; on a shared machine the short runs are those that escape preemption):
//   hot        alloc(64) then free of the same 64, every iteration: a fresh
//              pool, so the ids are 0..63 (one whole bitmap word, one run)
//   scattered  the pool is 60% live at random first (seed 1); the batch is
//              the 64 lowest free ids (spread over ~150 blocks, mostly single
//              ids and short runs), freed in a random order, a different one
//              each iteration (256 orders in turn, so branch predictors
//              cannot learn one); alloc hands back the same 64, ascending
//   scattered_ascending  the same batch freed in the ascending order alloc
//              gave it (a request returning its blocks as it got them)
// each as two calls (free, alloc) and as one free_and_alloc call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "unipool/kv_block_pool.hpp"

namespace {

using unipool::KVBlockPool;
using unipool::Status;

template <class Body>
double best_ns_per_iteration(long iterations, Body body) {
  double best = 1e300;
  iterations = std::max(1L, iterations / 5);
  for (int repeat = 0; repeat < 25; ++repeat) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < iterations; ++i) {
      if (!body()) {
        std::fprintf(stderr, "kv_alloc_cpp: a call failed: %s\n", KVBlockPool::last_error());
        std::exit(1);
      }
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ns / static_cast<double>(iterations));
  }
  return best;
}

// Two ways to move a batch: free then alloc (two calls), or free_and_alloc
// (one call). Either way the batch freed comes straight back.
struct Costs {
  double two_calls, one_call;
};

// `orders` holds the same batch of live ids in one or more orders, freed in
// turn; `out` receives the batch alloc hands back.
Costs measure(KVBlockPool& pool, const std::vector<std::vector<int64_t>>& orders, std::vector<int64_t>& out,
              long iterations) {
  const size_t n = out.size(), mask = orders.size() - 1;  // a power of two
  Costs c{};
  long i = 0;
  c.two_calls = best_ns_per_iteration(iterations, [&] {
    const int64_t* ids = orders[static_cast<size_t>(i++) & mask].data();
    return pool.deallocate(ids, n) == Status::ok && pool.allocate(n, out.data()) == Status::ok;
  });
  c.one_call = best_ns_per_iteration(iterations, [&] {
    const int64_t* ids = orders[static_cast<size_t>(i++) & mask].data();
    return pool.deallocate_and_allocate(ids, n, n, out.data()) == Status::ok;
  });
  return c;
}

// Whether a and b hold the same ids (the batch came back), in any order.
bool same_ids(std::vector<int64_t> a, std::vector<int64_t> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t batch = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64;
  const long iterations = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 2000000;
  const uint64_t num_blocks = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 4096;
  if (batch == 0 || iterations <= 0 || num_blocks < 4 * batch) {
    std::fprintf(stderr, "usage: kv_alloc_cpp [batch>0] [iterations>0] [num_blocks>=4*batch]\n");
    return 2;
  }
  // A server process has threads; glibc takes cheaper paths in a process
  // that never had a second one, so the figures would flatter.
  std::thread([] {}).join();

  unipool::KVBlockPoolOptions o;
  o.block_bytes = 4096;  // the cost does not depend on the block size
  o.num_blocks = num_blocks;
  o.pinned = unipool::HostPinned::off;

  KVBlockPool hot_pool(o);
  std::vector<int64_t> hot(batch), out(batch);
  if (hot_pool.allocate(batch, hot.data()) != Status::ok) return 1;
  const Costs hot_costs = measure(hot_pool, {hot}, out, iterations);
  if (!same_ids(out, hot) || hot_pool.deallocate(out.data(), batch) != Status::ok || !hot_pool.validate()) return 1;

  KVBlockPool churned(o);
  std::mt19937_64 rng(1);
  std::vector<int64_t> all(num_blocks);
  if (churned.allocate(num_blocks, all.data()) != Status::ok) return 1;
  std::shuffle(all.begin(), all.end(), rng);
  const size_t freed = num_blocks * 2 / 5;
  if (churned.deallocate(all.data(), freed) != Status::ok) return 1;  // 60% stay live, at random
  std::vector<int64_t> ascending(batch);
  if (churned.allocate(batch, ascending.data()) != Status::ok) return 1;  // the lowest free: ascending, gappy
  std::vector<std::vector<int64_t>> shuffled(256, ascending);
  for (std::vector<int64_t>& order : shuffled) std::shuffle(order.begin(), order.end(), rng);
  const Costs scattered_costs = measure(churned, shuffled, out, iterations);
  if (!same_ids(out, ascending) || !churned.validate()) return 1;
  const Costs ascending_costs = measure(churned, {ascending}, out, iterations);
  if (!same_ids(out, ascending) || !churned.validate()) return 1;
  const auto [lowest, highest] = std::minmax_element(ascending.begin(), ascending.end());
  const uint64_t span = static_cast<uint64_t>(*highest - *lowest + 1);

  const double per = static_cast<double>(batch);
  std::printf(
      "{\"batch\": %zu, \"iterations\": %ld, \"num_blocks\": %llu, "
      "\"ns_per_batch\": %.2f, \"ns_per_block\": %.3f, "
      "\"hot_free_and_alloc_ns_per_batch\": %.2f, \"hot_free_and_alloc_ns_per_block\": %.3f, "
      "\"scattered_ns_per_batch\": %.2f, \"scattered_ns_per_block\": %.3f, "
      "\"scattered_free_and_alloc_ns_per_batch\": %.2f, \"scattered_free_and_alloc_ns_per_block\": %.3f, "
      "\"scattered_ascending_ns_per_batch\": %.2f, \"scattered_ascending_free_and_alloc_ns_per_batch\": %.2f, "
      "\"scattered_span_blocks\": %llu}\n",
      batch, iterations, static_cast<unsigned long long>(num_blocks), hot_costs.two_calls, hot_costs.two_calls / per,
      hot_costs.one_call, hot_costs.one_call / per, scattered_costs.two_calls, scattered_costs.two_calls / per,
      scattered_costs.one_call, scattered_costs.one_call / per, ascending_costs.two_calls, ascending_costs.one_call,
      static_cast<unsigned long long>(span));
  return 0;
}
