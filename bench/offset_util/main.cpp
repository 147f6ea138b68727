// offset_util: the range-allocator benchmark of Mooncake's allocator_bench,
// for unipool's RangeAllocator against the classic OffsetAllocator policies.
//
//   offset_util [--quick] [--json FILE] [--policy NAME]... [--workload W]...
//               [--size N]... [--seed N] [--calls N] [--repeat N] [--check]
//               [--mooncake-format]
//
// Tables go to stdout, progress to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "report.hpp"
#include "workloads.hpp"

namespace {

using namespace offset_util;

bool wanted(const std::vector<std::string>& filter, const std::string& name) {
  return filter.empty() || std::find(filter.begin(), filter.end(), name) != filter.end();
}

// "unipool" selects every alignment of it; "unipool@256" only that one;
// "all" (or no filter) every policy.
std::vector<PolicySpec> select_policies(const std::vector<std::string>& filter) {
  std::vector<PolicySpec> out;
  for (const auto& p : all_policies()) {
    if (filter.empty() || wanted(filter, "all") || wanted(filter, p.name()) ||
        wanted(filter, std::string(p.name()) + "@" + std::to_string(p.align))) {
      out.push_back(p);
    }
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

// Runs every policy `repeat` times, round-robin, so background load spreads
// over all of them. Keeps the first run's result with the fastest time in
// `ns` and every time in ns_runs. `describe` gives the deterministic part
// (utilization), which must not change between runs.
template <class R, class Run, class Describe>
std::vector<R> run_repeated(const std::vector<PolicySpec>& policies, uint32_t repeat, double R::*ns,
                            Run&& run, Describe&& describe, const std::string& tag) {
  std::vector<R> best(policies.size());
  for (uint32_t k = 0; k < std::max<uint32_t>(repeat, 1); ++k) {
    for (size_t i = 0; i < policies.size(); ++i) {
      const auto t = std::chrono::steady_clock::now();
      R r = run(policies[i]);
      const std::string what = describe(r);
      std::fprintf(stderr, "[%s] %-12s %s %8.1f ns  (run %u, %.1f s)\n", tag.c_str(),
                   policies[i].label().c_str(), what.c_str(), r.*ns, k + 1, seconds_since(t));
      if (k == 0) {
        best[i] = std::move(r);
        best[i].ns_runs = {best[i].*ns};
        continue;
      }
      if (what != describe(best[i])) {
        std::fprintf(stderr, "offset_util: warning: run %u of %s %s is not deterministic\n", k + 1,
                     tag.c_str(), policies[i].label().c_str());
      }
      best[i].ns_runs.push_back(r.*ns);
      best[i].*ns = std::min(best[i].*ns, r.*ns);
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"offset_util: range-allocator utilization benchmark (Mooncake allocator_bench's workloads)"};
  RunConfig cfg;
  std::string json_path;
  std::vector<std::string> policy_filter, workload_filter;
  std::vector<uint64_t> size_filter;
  uint64_t calls = 0;
  bool mooncake_format = false;
  app.add_flag("--quick", cfg.quick, "reduced counts for a smoke run (a few seconds)");
  app.add_option("--json", json_path, "write the results as JSON to FILE");
  app.add_option("--policy", policy_filter,
                 "run only these policies: unipool (both alignments), unipool@1, unipool@256, "
                 "bin-roundup, exact (repeatable)");
  app.add_option("--workload", workload_filter, "run only these workloads (repeatable)")
      ->check(CLI::IsMember({"uniform", "random", "paired", "pair"}));
  app.add_option("--size", size_filter, "uniform: run only these sizes of the lists (repeatable)");
  app.add_option("--seed", cfg.seed, "seed of every random stream (the same for all policies)");
  app.add_option("--calls", calls, "measured calls of the uniform and random workloads");
  app.add_option("--repeat", cfg.repeat,
                 "runs per policy, round-robin; the fastest time is reported (default 3, quick 1)");
  uint32_t fit_scan_limit = 0;
  app.add_option("--fit-scan-limit", fit_scan_limit,
                 "unipool: RangeAllocatorOptions::fit_scan_limit (default: the library's)");
  app.add_flag("--check", cfg.check, "validate each allocator's invariants after every run");
  app.add_flag("--mooncake-format", mooncake_format,
               "also print per-policy tables in the layout of Mooncake allocator_bench's results");
  CLI11_PARSE(app, argc, argv);

  if (cfg.quick) {
    if (app.count("--repeat") == 0) cfg.repeat = 1;
    cfg.uniform_calls = 20'000;
    cfg.random_calls = 20'000;
    cfg.paired_warmup_rounds = 200;
    cfg.paired_rounds = 2'000;
    // 1 TiB would not fill in 2,200 rounds (no eviction, no sample): 32 GiB does.
    cfg.paired_pool = uint64_t{32} << 30;
    cfg.pair_count = 200'000;
    cfg.pair_warmup = 20'000;
  }
  if (calls > 0) cfg.uniform_calls = cfg.random_calls = calls;

  for (const auto& name : policy_filter) {
    if (select_policies({name}).empty()) {
      std::cerr << "offset_util: unknown --policy " << name
                << " (all, unipool, unipool@1, unipool@256, bin-roundup, exact)\n";
      return 2;
    }
  }
  std::vector<PolicySpec> policies = select_policies(policy_filter);
  for (auto& p : policies) p.fit_scan_limit = fit_scan_limit;
  std::vector<SizeList> lists = uniform_size_lists(cfg.quick && size_filter.empty());
  if (!size_filter.empty()) {
    for (auto& list : lists) {
      std::erase_if(list.sizes, [&](uint64_t s) {
        return std::find(size_filter.begin(), size_filter.end(), s) == size_filter.end();
      });
    }
    std::erase_if(lists, [](const SizeList& l) { return l.sizes.empty(); });
  }

  const auto t0 = std::chrono::steady_clock::now();
  Results results;
  std::ostream& out = std::cout;
  print_header(out, cfg, policies);
  out.flush();

  try {
    if (wanted(workload_filter, "uniform")) {
      for (const auto& list : lists) {
        for (uint64_t size : list.sizes) {
          char tag[64];
          std::snprintf(tag, sizeof tag, "uniform %-7s %9llu", list.name.c_str(),
                        static_cast<unsigned long long>(size));
          for (auto& r : run_repeated<UniformResult>(
                   policies, cfg.repeat, &UniformResult::ns_per_op,
                   [&](const PolicySpec& p) { return run_uniform(p, list.name, size, cfg); },
                   [](const UniformResult& r) {
                     return "min " + fmt(r.min_util) + " avg " + fmt(r.avg_util) + " limit " +
                            fmt(r.limit);
                   },
                   tag)) {
            results.uniform.push_back(std::move(r));
          }
        }
        print_uniform_list(out, list, results, policies);
        out.flush();
      }
      print_uniform_summary(out, results, policies);
    }
    if (wanted(workload_filter, "random")) {
      results.random = run_repeated<RandomResult>(
          policies, cfg.repeat, &RandomResult::ns_per_op,
          [&](const PolicySpec& p) { return run_random(p, cfg); },
          [](const RandomResult& r) { return "avg " + fmt(r.avg) + " p1 " + fmt(r.p1); }, "random");
      print_random(out, results, cfg);
      out.flush();
    }
    if (wanted(workload_filter, "paired")) {
      results.paired = run_repeated<PairedResult>(
          policies, cfg.repeat, &PairedResult::ns_per_op,
          [&](const PolicySpec& p) { return run_paired(p, cfg); },
          [](const PairedResult& r) {
            return "avg " + fmt(r.avg_util) + " samples " + std::to_string(r.samples);
          },
          "paired");
      print_paired(out, results, cfg);
      out.flush();
    }
    if (wanted(workload_filter, "pair")) {
      results.pair = run_repeated<PairResult>(
          policies, cfg.repeat, &PairResult::ns_per_pair,
          [&](const PolicySpec& p) { return run_pair(p, cfg); },
          [](const PairResult& r) { return "failures " + std::to_string(r.failures); }, "pair");
      print_pair(out, results, cfg);
      out.flush();
    }
  } catch (const std::exception& e) {
    std::cerr << "offset_util: " << e.what() << '\n';
    return 1;
  }

  print_targets(out, results);
  if (mooncake_format) print_mooncake_format(out, results, lists, policies);
  char total[64];
  std::snprintf(total, sizeof total, "%.1f", seconds_since(t0));
  out << "Total time: " << total << " s\n";

  if (!json_path.empty()) {
    std::ofstream file(json_path);
    file << to_json(results).dump(2) << '\n';
    if (!file) {
      std::cerr << "offset_util: cannot write " << json_path << '\n';
      return 1;
    }
  }
  return 0;
}
