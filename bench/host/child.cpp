#include "child.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <barrier>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "cell_result.hpp"
#include "workloads.hpp"

namespace host_bench {

void die(const char* what) {
  std::fprintf(stderr, "host_bench: %s\n", what);
  std::fflush(stderr);
  std::_Exit(2);
}

namespace {

uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

double cpu_seconds(const rusage& u) {
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

// Thread t runs on the t-th CPU this process may use (modulo their count),
// so that every allocator gets the same placement: left to the scheduler,
// 4 threads on 2 CPUs put a producer and its consumer on one CPU in some
// runs and on two in others, and producer_consumer's throughput moved 3x
// between runs of the same allocator. false when the CPU set cannot be
// read or set (the thread then runs where the scheduler puts it).
bool pin_to_cpu(unsigned t) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  const int count = CPU_COUNT(&allowed);
  if (count == 0) return false;
  int skip = static_cast<int>(t % static_cast<unsigned>(count));
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || skip-- > 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  return false;
}

struct Worker {
  ThreadTally tally;
  uint64_t end_ns = 0;
};

void summarize(CellResult& r, const std::vector<Worker>& workers) {
  LatencyHistogram alloc_ticks, free_ticks;
  uint64_t requested = 0, usable = 0;
  for (const auto& w : workers) {
    alloc_ticks.merge(w.tally.alloc_ticks);
    free_ticks.merge(w.tally.free_ticks);
    r.ops += w.tally.allocs + w.tally.frees;
    r.thread_peaks_requested_bytes += w.tally.peak_requested;
    requested += w.tally.sampled_requested;
    usable += w.tally.sampled_usable;
  }
  const double ns = ns_per_tick();
  r.p50_alloc_ns = alloc_ticks.quantile_ticks(0.50) * ns;
  r.p99_alloc_ns = alloc_ticks.quantile_ticks(0.99) * ns;
  r.p50_free_ns = free_ticks.quantile_ticks(0.50) * ns;
  r.p99_free_ns = free_ticks.quantile_ticks(0.99) * ns;
  r.usable_over_requested = requested ? static_cast<double>(usable) / static_cast<double>(requested) : 0.0;
}

}  // namespace

int run_child(const ChildArgs& args) {
  const WorkloadInfo* info = find_workload(args.workload);
  if (info == nullptr) die("unknown workload");
  if (!args.expect_symbol.empty() && dlsym(RTLD_DEFAULT, args.expect_symbol.c_str()) == nullptr) {
    std::fprintf(stderr, "host_bench: symbol %s not found: the allocator was not preloaded\n",
                 args.expect_symbol.c_str());
    return 3;
  }
  ns_per_tick();  // calibrate before any thread starts

  const unsigned n = args.threads;
  std::vector<Worker> workers(n);
  LiveBoard board(n);
  std::barrier ready(static_cast<std::ptrdiff_t>(n) + 1);
  std::barrier go(static_cast<std::ptrdiff_t>(n) + 1);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      if (args.pin && !pin_to_cpu(t)) {
        std::fprintf(stderr, "host_bench: thread %u left unpinned (sched_setaffinity failed)\n", t);
      }
      auto work = make_thread_work(args.workload, args.quick, t, n);
      Meter meter(info->sample_period, board, t);
      ready.arrive_and_wait();
      go.arrive_and_wait();
      work->run(meter);
      workers[t].end_ns = monotonic_ns();
      board.sample();
      workers[t].tally = meter.tally();
    });
  }

  ready.arrive_and_wait();
  CellResult r;
  r.workload = args.workload;
  r.threads = n;
  r.baseline_rss_bytes = resident_bytes();
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const uint64_t start_ns = monotonic_ns();
  go.arrive_and_wait();
  for (auto& th : threads) th.join();
  getrusage(RUSAGE_SELF, &after);

  uint64_t end_ns = start_ns;
  for (const auto& w : workers) end_ns = std::max(end_ns, w.end_ns);
  r.wall_s = static_cast<double>(end_ns - start_ns) * 1e-9;
  r.cpu_s = cpu_seconds(after) - cpu_seconds(before);
  summarize(r, workers);
  r.peak_requested_bytes = board.peak();
  r.ops_per_s = r.wall_s > 0 ? static_cast<double>(r.ops) / r.wall_s : 0.0;
  r.ops_per_cpu_s = r.cpu_s > 0 ? static_cast<double>(r.ops) / r.cpu_s : 0.0;
  r.peak_rss_bytes = static_cast<uint64_t>(after.ru_maxrss) * 1024;
  r.page_faults = static_cast<uint64_t>((after.ru_minflt - before.ru_minflt) + (after.ru_majflt - before.ru_majflt));
  const uint64_t grown = r.peak_rss_bytes > r.baseline_rss_bytes ? r.peak_rss_bytes - r.baseline_rss_bytes : 0;
  r.rss_over_requested =
      r.peak_requested_bytes ? static_cast<double>(grown) / static_cast<double>(r.peak_requested_bytes) : 0.0;
  r.rss_over_thread_peaks = r.thread_peaks_requested_bytes ? static_cast<double>(grown) /
                                                                 static_cast<double>(r.thread_peaks_requested_bytes)
                                                           : 0.0;
  r.timer_overhead_ns = timer_overhead_ns();
  const auto cpus = static_cast<double>(std::min<long>(n, sysconf(_SC_NPROCESSORS_ONLN)));
  r.cpu_share = r.wall_s > 0 ? r.cpu_s / (r.wall_s * cpus) : 0.0;

  std::printf("%s\n", to_json(r).dump().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace host_bench
