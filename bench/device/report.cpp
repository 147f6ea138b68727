// bench/device: reporting.
#include "report.hpp"

#include <cstdio>
#include <utility>

#include "peers.hpp"

namespace device_bench {

namespace {

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

const Result* find(const std::vector<Result>& results, const std::string& trace, const std::string& allocator) {
  for (const Result& r : results) {
    if (r.trace == trace && r.allocator == allocator) return &r;
  }
  return nullptr;
}

const HotPath* find_hot(const std::vector<HotPath>& hot, const std::string& allocator, uint64_t bytes) {
  for (const HotPath& h : hot) {
    if (h.allocator == allocator && h.bytes == bytes) return &h;
  }
  return nullptr;
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "hot path B bytes <= 0.5 x THEIRS (OURS)" for each size measured and each
// (ours, theirs) pair present in the run.
void hot_path_targets(const std::vector<HotPath>& hot, const std::vector<std::pair<const char*, const char*>>& pairs,
                      std::vector<Target>& t) {
  for (const uint64_t bytes : {uint64_t{4096}, uint64_t{1} << 20}) {
    for (const auto& [ours, theirs] : pairs) {
      const HotPath* u = find_hot(hot, ours, bytes);
      const HotPath* c = find_hot(hot, theirs, bytes);
      if (u == nullptr || c == nullptr) continue;
      t.push_back({"hot path " + std::to_string(bytes) + " B <= 0.5 x " + theirs + " (" + ours + ")",
                   u->ns_per_op <= 0.5 * c->ns_per_op,
                   fixed(u->ns_per_op, 1) + " ns vs " + theirs + " " + fixed(c->ns_per_op, 1) + " ns (" +
                       fixed(u->ns_per_op / c->ns_per_op, 2) + " x)"});
    }
  }
}

}  // namespace

void print_trace_table(const std::vector<Result>& results, const std::string& trace) {
  std::printf("\n== trace %s ==\n", trace.c_str());
  std::printf("%-20s %14s %14s %7s %14s %14s %14s %10s\n", "allocator", "peak req MiB", "peak res MiB", "util",
              "backend calls", "calls/1k warm", "pool/1k warm", "ns/op");
  for (const Result& r : results) {
    if (r.trace != trace) continue;
    std::printf("%-20s %14s %14s %7.4f %14llu %14.3f %14.3f %10.1f\n", r.allocator.c_str(),
                mib(r.peak_requested).c_str(), mib(r.peak_reserved).c_str(), r.util,
                static_cast<unsigned long long>(r.backend_calls), r.calls_per_1k_after_warmup,
                r.pool_calls_per_1k_after_warmup, r.ns_per_op);
  }
}

void print_hot_path_table(const std::vector<HotPath>& hot) {
  std::printf("\n== hot path: allocate + free of a cached block, same stream ==\n");
  std::printf("%-20s %10s %10s\n", "allocator", "bytes", "ns/op");
  for (const HotPath& h : hot) {
    std::printf("%-20s %10llu %10.1f\n", h.allocator.c_str(), static_cast<unsigned long long>(h.bytes), h.ns_per_op);
  }
}

namespace {

// The pool's own targets: utilization, the hot path against CUB, backend
// calls after warm-up.
void pool_targets(const std::vector<Result>& results, const std::vector<HotPath>& hot, std::vector<Target>& t) {
  const Result* exp = find(results, "inference", "unipool:expandable");
  const Result* plain = find(results, "inference", "unipool");
  const Result* cub = find(results, "inference", "cub");
  if (exp != nullptr) t.push_back({"inference util >= 0.95 (unipool:expandable)", exp->util >= 0.95, fixed(exp->util, 4)});
  if (plain != nullptr) t.push_back({"inference util >= 0.85 (unipool)", plain->util >= 0.85, fixed(plain->util, 4)});
  if (cub != nullptr) {
    for (const Result* u : {exp, plain}) {
      if (u == nullptr) continue;
      t.push_back({"inference util above cub's (" + u->allocator + ")", u->util > cub->util,
                   fixed(u->util, 4) + " vs cub " + fixed(cub->util, 4)});
    }
  }
  if (const Result* g = find(results, "batch_growth", "unipool:expandable")) {
    const double ratio = static_cast<double>(g->peak_reserved) / static_cast<double>(g->peak_requested);
    t.push_back({"batch_growth peak reserved <= 1.05 x largest step (unipool:expandable)", ratio <= 1.05,
                 fixed(ratio, 4) + " x"});
  }
  hot_path_targets(hot, {{"unipool", "cub"}, {"unipool:expandable", "cub"}}, t);
  for (const char* trace : {"inference", "batch_growth"}) {
    for (const char* name : {"unipool", "unipool:expandable"}) {
      if (const Result* r = find(results, trace, name)) {
        // Pool-to-backend calls, the units the target was set in (see
        // counting_backend.hpp); the driver calls are in the table.
        t.push_back({std::string(trace) + " < 1 pool->backend call per 1,000 allocations after warm-up (" + name + ")",
                     r->pool_calls_per_1k_after_warmup < 1.0,
                     fixed(r->pool_calls_per_1k_after_warmup, 3) + " per 1k (" +
                         fixed(r->calls_per_1k_after_warmup, 3) + " null GPU calls per 1k)"});
      }
    }
  }
}

// Against PyTorch's CUDACachingAllocator, plain against plain and
// expandable against expandable: the hot path, and peak reserved on every
// trace of the run.
void torch_targets(const std::vector<Result>& results, const std::vector<HotPath>& hot, std::vector<Target>& t) {
  const std::vector<std::pair<const char*, const char*>> pairs = {{"unipool", "torch"},
                                                                  {"unipool:expandable", "torch:expandable"}};
  hot_path_targets(hot, pairs, t);
  for (const Result& r : results) {
    for (const auto& [ours, theirs] : pairs) {
      if (r.allocator != ours) continue;
      const Result* peer = find(results, r.trace, theirs);
      if (peer == nullptr) continue;
      t.push_back({r.trace + " peak reserved <= " + theirs + "'s (" + ours + ")",
                   r.peak_reserved <= peer->peak_reserved,
                   mib(r.peak_reserved) + " MiB vs " + mib(peer->peak_reserved) + " MiB"});
    }
  }
}

}  // namespace

std::vector<Target> evaluate_targets(const std::vector<Result>& results, const std::vector<HotPath>& hot) {
  std::vector<Target> t;
  pool_targets(results, hot, t);
  torch_targets(results, hot, t);
  return t;
}

void print_targets(const std::vector<Target>& targets) {
  std::printf("\n== targets ==\n");
  for (const Target& t : targets) {
    std::printf("[%s] %s: %s\n", t.met ? "met   " : "MISSED", t.name.c_str(), t.detail.c_str());
  }
}

nlohmann::json to_json(const std::vector<PeerInfo>& peers, const std::vector<Result>& results, const std::vector<HotPath>& hot,
                       const std::vector<Target>& targets, bool quick) {
  using nlohmann::json;
  json records = json::array();
  for (const Result& r : results) {
    records.push_back({{"trace", r.trace},
                       {"allocator", r.allocator},
                       {"peak_requested", r.peak_requested},
                       {"peak_reserved", r.peak_reserved},
                       {"util", r.util},
                       {"backend_calls", r.backend_calls},
                       {"ns_per_op", r.ns_per_op},
                       {"calls_per_1k_after_warmup", r.calls_per_1k_after_warmup},
                       {"pool_calls_per_1k_after_warmup", r.pool_calls_per_1k_after_warmup},
                       {"allocations", r.allocations}});
  }
  json hot_json = json::array();
  for (const HotPath& h : hot) hot_json.push_back({{"allocator", h.allocator}, {"bytes", h.bytes}, {"ns_per_op", h.ns_per_op}});
  json peer_json = json::array();
  for (const PeerInfo& p : peers) peer_json.push_back({{"allocator", p.name}, {"runs_on", p.runs_on}});
  json target_json = json::array();
  for (const Target& t : targets) target_json.push_back({{"target", t.name}, {"met", t.met}, {"detail", t.detail}});
  return {{"benchmark", "device"},
          {"quick", quick},
          {"baselines_run_on", baseline_substrate()},
          {"peers", peer_json},
          {"records", records},
          {"hot_path", hot_json},
          {"targets", target_json}};
}

}  // namespace device_bench
