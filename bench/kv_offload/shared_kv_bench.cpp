// bench/kv_offload: what sharing a KV pool between processes costs.
// Workers each allocate a batch of 64 blocks and free it, `iterations`
// times, from 1, 2, 4 and 8 workers at once:
//   in-process  one KVBlockPool, the workers are threads of this process
//   shared      one SharedKVBlockPool, the workers are processes (this
//               program again, attached by name)
// Reported per batch (alloc + free): wall time of the whole run over the
// batches of all workers (the pool's throughput), and CPU time over batches
// (the cost each batch pays, waiting for the lock included). Best of
// `rounds` runs, each case in turn, so both see the same machine.
//   shared_kv_bench [--iterations N] [--rounds R] [--quick] [--json PATH]
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "unipool/kv_block_pool.hpp"
#include "unipool/shared_kv_block_pool.hpp"

namespace {

using unipool::Status;

constexpr size_t kBatch = 64;
constexpr uint64_t kBlocks = 8192, kBlockBytes = 4096;

double now_ns(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

// One worker's loop; returns its CPU ns.
template <class Pool>
double churn(Pool& pool, long iterations) {
  uint32_t ids[kBatch];
  const double cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < iterations; ++i) {
    if (pool.allocate(kBatch, ids) != Status::ok || pool.deallocate(ids, kBatch) != Status::ok) {
      std::fprintf(stderr, "shared_kv_bench: a call failed: %s\n", Pool::last_error());
      std::exit(1);
    }
  }
  return now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
}

struct Run {
  double wall_ns_per_batch, cpu_ns_per_batch;
};

Run in_process(int workers, long iterations) {
  unipool::KVBlockPoolOptions o;
  o.block_bytes = kBlockBytes;
  o.num_blocks = kBlocks;
  o.pinned = unipool::HostPinned::off;
  unipool::KVBlockPool pool(o);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> cpu(static_cast<size_t>(workers));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      cpu[static_cast<size_t>(w)] = churn(pool, iterations);
    });
  }
  while (ready.load() != workers) std::this_thread::yield();
  const double t0 = now_ns(CLOCK_MONOTONIC);
  go.store(true);
  for (std::thread& t : threads) t.join();
  const double wall = now_ns(CLOCK_MONOTONIC) - t0, batches = static_cast<double>(workers) * iterations;
  double cpu_sum = 0;
  for (double c : cpu) cpu_sum += c;
  return {wall / batches, cpu_sum / batches};
}

// A worker process: attaches, says so, waits for the start (its stdin
// closing), churns, reports its CPU ns.
int child(const char* name, long iterations) {
  unipool::SharedKVAttachOptions o;
  o.pinned = unipool::HostPinned::off;
  auto pool = unipool::SharedKVBlockPool::attach(name, o);
  std::printf("ready\n");
  std::fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  std::printf("%.0f\n", churn(*pool, iterations));
  std::fflush(stdout);
  return 0;
}

Run shared(int workers, long iterations) {
  const std::string name = "bench." + std::to_string(getpid());
  unipool::SharedKVBlockPoolOptions o;
  o.block_bytes = kBlockBytes;
  o.num_blocks = kBlocks;
  o.pinned = unipool::HostPinned::off;
  auto pool = unipool::SharedKVBlockPool::create(name, o);
  int start[2];
  if (pipe(start) != 0) std::exit(1);
  std::vector<pid_t> pids;
  std::vector<FILE*> outs;
  const std::string iters = std::to_string(iterations);
  for (int w = 0; w < workers; ++w) {
    int out[2];
    if (pipe(out) != 0) std::exit(1);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(start[0], 0);
      dup2(out[1], 1);
      close(start[1]);
      close(out[0]);
      execl("/proc/self/exe", "shared_kv_bench", "--child", name.c_str(), iters.c_str(), nullptr);
      _exit(127);
    }
    close(out[1]);
    pids.push_back(pid);
    outs.push_back(fdopen(out[0], "r"));
  }
  close(start[0]);
  char line[64];
  for (FILE* f : outs) {
    if (!fgets(line, sizeof line, f) || std::strcmp(line, "ready\n") != 0) std::exit(1);
  }
  const double t0 = now_ns(CLOCK_MONOTONIC);
  close(start[1]);
  double cpu_sum = 0;
  for (FILE* f : outs) {
    if (!fgets(line, sizeof line, f)) std::exit(1);
    cpu_sum += std::atof(line);
  }
  const double wall = now_ns(CLOCK_MONOTONIC) - t0, batches = static_cast<double>(workers) * iterations;
  for (size_t i = 0; i < pids.size(); ++i) {
    fclose(outs[i]);
    waitpid(pids[i], nullptr, 0);
  }
  std::string why;
  if (!pool->validate(&why) || pool->stats().live_blocks != 0) {
    std::fprintf(stderr, "shared_kv_bench: the shared books are wrong after the run: %s\n", why.c_str());
    std::exit(1);
  }
  return {wall / batches, cpu_sum / batches};
}

Run best(Run a, Run b) {
  return {std::min(a.wall_ns_per_batch, b.wall_ns_per_batch), std::min(a.cpu_ns_per_batch, b.cpu_ns_per_batch)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return child(argv[2], std::atol(argv[3]));
  long iterations = 200000;
  int rounds = 5;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iterations" && i + 1 < argc) {
      iterations = std::atol(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      iterations = 20000, rounds = 2;
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: shared_kv_bench [--iterations N] [--rounds R] [--quick] [--json PATH]\n");
      return 2;
    }
  }
  const int counts[] = {1, 2, 4, 8};
  Run local[4], across[4];
  for (int k = 0; k < 4; ++k) local[k] = across[k] = {1e300, 1e300};
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 4; ++k) {
      local[k] = best(local[k], in_process(counts[k], iterations));
      across[k] = best(across[k], shared(counts[k], iterations));
    }
  }
  std::printf(
      "alloc+free of a batch of %zu blocks, ns per batch (best of %d runs of %ld batches per worker; "
      "%u CPUs)\n\n",
      kBatch, rounds, iterations, std::thread::hardware_concurrency());
  std::printf(
      "| workers | KVBlockPool, threads: wall | CPU | SharedKVBlockPool, processes: wall | CPU | "
      "shared / in-process (CPU) |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int k = 0; k < 4; ++k) {
    std::printf("| %d | %.0f | %.0f | %.0f | %.0f | %.2fx |\n", counts[k], local[k].wall_ns_per_batch,
                local[k].cpu_ns_per_batch, across[k].wall_ns_per_batch, across[k].cpu_ns_per_batch,
                across[k].cpu_ns_per_batch / local[k].cpu_ns_per_batch);
  }
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f) return 1;
    std::fprintf(f, "{\"batch\": %zu, \"iterations\": %ld, \"rounds\": %d, \"cpus\": %u, \"rows\": [", kBatch,
                 iterations, rounds, std::thread::hardware_concurrency());
    for (int k = 0; k < 4; ++k) {
      std::fprintf(f,
                   "%s{\"workers\": %d, \"in_process_wall_ns\": %.1f, \"in_process_cpu_ns\": %.1f, "
                   "\"shared_wall_ns\": %.1f, \"shared_cpu_ns\": %.1f}",
                   k ? ", " : "", counts[k], local[k].wall_ns_per_batch, local[k].cpu_ns_per_batch,
                   across[k].wall_ns_per_batch, across[k].cpu_ns_per_batch);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
