#include "report.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>

#include "tsc_clock.hpp"

namespace host_bench {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

const CellResult* find(const std::vector<CellResult>& rs, const std::string& allocator, const std::string& workload,
                       unsigned threads) {
  for (const auto& r : rs) {
    if (r.allocator == allocator && r.workload == workload && r.threads == threads) return &r;
  }
  return nullptr;
}

std::string ratio(double mine, const CellResult* base, double CellResult::*field) {
  if (base == nullptr || base->*field <= 0) return "-";
  return fmt("%.2fx", mine / (base->*field));
}

std::vector<unsigned> thread_counts(const std::vector<CellResult>& rs, const std::string& workload) {
  std::vector<unsigned> t;
  for (const auto& r : rs) {
    if (r.workload == workload && std::find(t.begin(), t.end(), r.threads) == t.end()) t.push_back(r.threads);
  }
  std::sort(t.begin(), t.end());
  return t;
}

// unipool beside itself (unipool:hardened, unipool@TAG builds): each one's
// throughput over plain unipool's in the same run, per thread count.
void print_variants(std::ostream& out, const std::vector<CellResult>& rs, const std::string& workload) {
  std::vector<std::string> variants;
  for (const auto& r : rs) {
    const bool variant = r.allocator == "unipool:hardened" || r.allocator.rfind("unipool@", 0) == 0;
    if (variant && r.workload == workload &&
        std::find(variants.begin(), variants.end(), r.allocator) == variants.end()) {
      variants.push_back(r.allocator);
    }
  }
  for (const auto& v : variants) {
    for (const unsigned t : thread_counts(rs, workload)) {
      const CellResult* mine = find(rs, v, workload, t);
      const CellResult* plain = find(rs, "unipool", workload, t);
      if (mine == nullptr || plain == nullptr) continue;
      out << "- " << v << " / unipool x" << t << ": ops per CPU-second "
          << ratio(mine->ops_per_cpu_s, plain, &CellResult::ops_per_cpu_s) << ", ops/s "
          << ratio(mine->ops_per_s, plain, &CellResult::ops_per_s) << "\n";
    }
  }
  if (!variants.empty()) out << "\n";
}

void print_general(std::ostream& out, const std::vector<CellResult>& rs, const std::string& workload) {
  out << "| allocator | threads | Mops/s | vs glibc | vs mimalloc | Mops/CPU-s | alloc p50 ns | alloc p99 ns "
         "| free p50 ns | free p99 ns | peak RSS MiB | page faults | usable/req | CPU share |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const unsigned t : thread_counts(rs, workload)) {
    const CellResult* glibc = find(rs, "glibc", workload, t);
    const CellResult* mi = find(rs, "mimalloc", workload, t);
    for (const auto& r : rs) {
      if (r.workload != workload || r.threads != t) continue;
      out << "| " << r.allocator << " | " << t << " | " << fmt("%.2f", r.ops_per_s / 1e6) << " | "
          << ratio(r.ops_per_s, glibc, &CellResult::ops_per_s) << " | " << ratio(r.ops_per_s, mi, &CellResult::ops_per_s)
          << " | " << fmt("%.2f", r.ops_per_cpu_s / 1e6) << " | " << fmt("%.0f", r.p50_alloc_ns) << " | " << fmt("%.0f", r.p99_alloc_ns) << " | "
          << fmt("%.0f", r.p50_free_ns) << " | " << fmt("%.0f", r.p99_free_ns) << " | "
          << fmt("%.1f", static_cast<double>(r.peak_rss_bytes) / (1 << 20)) << " | " << r.page_faults << " | "
          << fmt("%.3f", r.usable_over_requested) << " | " << fmt("%.2f", r.cpu_share) << " |\n";
    }
  }
}

// The thread-cache study reports work per CPU-second and memory per requested
// byte.
void print_thread_cache_study(std::ostream& out, const std::vector<CellResult>& rs, const std::string& workload) {
  out << "| allocator | threads | Mops/s | Mops/CPU-s | vs glibc | vs mimalloc | peak RSS MiB | peak requested MiB "
         "| RSS/requested | RSS/thread peaks | page faults | alloc p99 ns | free p99 ns | CPU share |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const unsigned t : thread_counts(rs, workload)) {
    const CellResult* glibc = find(rs, "glibc", workload, t);
    const CellResult* mi = find(rs, "mimalloc", workload, t);
    for (const auto& r : rs) {
      if (r.workload != workload || r.threads != t) continue;
      out << "| " << r.allocator << " | " << t << " | " << fmt("%.2f", r.ops_per_s / 1e6) << " | "
          << fmt("%.2f", r.ops_per_cpu_s / 1e6) << " | " << ratio(r.ops_per_cpu_s, glibc, &CellResult::ops_per_cpu_s)
          << " | " << ratio(r.ops_per_cpu_s, mi, &CellResult::ops_per_cpu_s) << " | "
          << fmt("%.1f", static_cast<double>(r.peak_rss_bytes) / (1 << 20)) << " | "
          << fmt("%.1f", static_cast<double>(r.peak_requested_bytes) / (1 << 20)) << " | "
          << fmt("%.3f", r.rss_over_requested) << " | " << fmt("%.3f", r.rss_over_thread_peaks) << " | "
          << r.page_faults << " | " << fmt("%.0f", r.p99_alloc_ns)
          << " | " << fmt("%.0f", r.p99_free_ns) << " | " << fmt("%.2f", r.cpu_share) << " |\n";
    }
  }
}

struct TargetPrinter {
  std::ostream& out;
  int met = 0;
  int missed = 0;
  void line(bool ok, const std::string& what) {
    (ok ? met : missed)++;
    out << "- " << (ok ? "PASS" : "MISS") << "  " << what << "\n";
  }
};

// The measure a target is not judged in, shown beside the one it is:
// " (<label>: unipool X<unit>, <a> Y<unit>[, <b> Z<unit>])", in millions.
// Per CPU-second beside ops/s (other load on the machine disturbs it far
// less), or ops/s beside a comparison made per CPU-second.
std::string beside(const char* label, double CellResult::*measure, const char* unit, const CellResult* u,
                   const CellResult* a, const CellResult* b = nullptr) {
  const auto figure = [&](const CellResult* r) { return fmt("%.2f", r->*measure / 1e6) + unit; };
  std::string s = std::string(" (") + label + ": unipool " + figure(u) + ", " + a->allocator + " " + figure(a);
  if (b != nullptr) s += ", " + b->allocator + " " + figure(b);
  return s + ")";
}
std::string per_cpu(const CellResult* u, const CellResult* a, const CellResult* b = nullptr) {
  return beside("per CPU-s", &CellResult::ops_per_cpu_s, "", u, a, b);
}
std::string per_wall(const CellResult* u, const CellResult* peer) {
  return beside("ops/s", &CellResult::ops_per_s, " M", u, peer);
}

void throughput_targets(TargetPrinter& tp, const std::vector<CellResult>& rs) {
  for (const unsigned t : {1u, 2u}) {
    const CellResult* u = find(rs, "unipool", "mid_mt", t);
    const CellResult* mi = find(rs, "mimalloc", "mid_mt", t);
    const CellResult* g = find(rs, "glibc", "mid_mt", t);
    if (u && mi && g) {
      tp.line(u->ops_per_s >= mi->ops_per_s && u->ops_per_s >= 2 * g->ops_per_s,
              "mid_mt x" + std::to_string(t) + ": unipool " + fmt("%.2f", u->ops_per_s / 1e6) + " Mops/s; mimalloc " +
                  fmt("%.2f", mi->ops_per_s / 1e6) + ", 2x glibc " + fmt("%.2f", 2 * g->ops_per_s / 1e6) +
                  per_cpu(u, mi, g));
    }
  }
  // These four are targets per CPU-second (wall-clock ops/s shown beside):
  // the best peer is the one with the most operations per CPU-second.
  for (const char* w : {"rl_small", "rl_medium", "fragmentation_mix", "alignment64"}) {
    for (const unsigned t : {1u, 2u}) {
      const CellResult* u = find(rs, "unipool", w, t);
      const CellResult* mi = find(rs, "mimalloc", w, t);
      if (!u || !mi) continue;
      const CellResult* best = mi;
      for (const char* peer : {"jemalloc", "tcmalloc"}) {
        const CellResult* p = find(rs, peer, w, t);
        if (p && p->ops_per_cpu_s > best->ops_per_cpu_s) best = p;
      }
      tp.line(u->ops_per_cpu_s >= best->ops_per_cpu_s,
              std::string(w) + " x" + std::to_string(t) + " ops per CPU-s: unipool " +
                  fmt("%.2f", u->ops_per_cpu_s / 1e6) + " M; best peer " + best->allocator + " " +
                  fmt("%.2f", best->ops_per_cpu_s / 1e6) + " M" + per_wall(u, best));
      tp.line(u->p99_alloc_ns <= mi->p99_alloc_ns,
              std::string(w) + " x" + std::to_string(t) + " p99 alloc: unipool " + fmt("%.0f", u->p99_alloc_ns) +
                  " ns; mimalloc " + fmt("%.0f", mi->p99_alloc_ns) + " ns");
    }
  }
}

// Blocks freed by another thread than the one that allocated them.
void handoff_targets(TargetPrinter& tp, const std::vector<CellResult>& rs) {
  for (const char* w : {"producer_consumer", "exchange"}) {
    for (const unsigned t : {2u, 4u}) {
      const CellResult* u = find(rs, "unipool", w, t);
      const CellResult* mi = find(rs, "mimalloc", w, t);
      if (!u || !mi) continue;
      const std::string cell = std::string(w) + " x" + std::to_string(t);
      tp.line(u->ops_per_cpu_s >= mi->ops_per_cpu_s,
              cell + " ops per CPU-s: unipool " + fmt("%.2f", u->ops_per_cpu_s / 1e6) + " M; mimalloc " +
                  fmt("%.2f", mi->ops_per_cpu_s / 1e6) + " M");
      tp.line(static_cast<double>(u->peak_rss_bytes) <= 1.1 * static_cast<double>(mi->peak_rss_bytes),
              cell + " peak RSS: unipool " + fmt("%.1f", static_cast<double>(u->peak_rss_bytes) / 1048576.0) +
                  " MiB; 1.1x mimalloc " +
                  fmt("%.1f", 1.1 * static_cast<double>(mi->peak_rss_bytes) / 1048576.0) + " MiB");
    }
  }
}

void study_targets(TargetPrinter& tp, const std::vector<CellResult>& rs) {
  const std::string w = "rpmalloc_random";
  for (const unsigned t : thread_counts(rs, w)) {
    const CellResult* mi = find(rs, "mimalloc", w, t);
    const CellResult* perf = find(rs, "unipool:performance", w, t);
    const CellResult* size = find(rs, "unipool:size", w, t);
    if (mi && perf) {
      tp.line(perf->ops_per_cpu_s >= mi->ops_per_cpu_s,
              w + " x" + std::to_string(t) + " ops/CPU-s: unipool:performance " +
                  fmt("%.2f", perf->ops_per_cpu_s / 1e6) + " M; mimalloc " + fmt("%.2f", mi->ops_per_cpu_s / 1e6) +
                  " M");
    }
    if (size) {
      tp.line(size->rss_over_requested <= 1.15, w + " x" + std::to_string(t) + " RSS/requested with size: " +
                                                    fmt("%.3f", size->rss_over_requested) +
                                                    " (<= 1.15; over the threads' own peaks summed: " +
                                                    fmt("%.3f", size->rss_over_thread_peaks) + ")");
    }
  }
}

// hakmem_mixed's target is per CPU-second; json, mir and vm keep the
// wall-clock target they were set with.
void hakmem_targets(TargetPrinter& tp, const std::vector<CellResult>& rs) {
  for (const char* w : {"hakmem_json", "hakmem_mir", "hakmem_vm", "hakmem_mixed"}) {
    for (const unsigned t : thread_counts(rs, w)) {
      const CellResult* u = find(rs, "unipool", w, t);
      const CellResult* g = find(rs, "glibc", w, t);
      if (!u || !g) continue;
      const std::string cell = std::string(w) + " x" + std::to_string(t);
      if (std::string(w) == "hakmem_mixed") {
        tp.line(u->ops_per_cpu_s >= g->ops_per_cpu_s, cell + " ops per CPU-s: unipool " +
                                                          fmt("%.2f", u->ops_per_cpu_s / 1e6) + " M; glibc " +
                                                          fmt("%.2f", g->ops_per_cpu_s / 1e6) + " M" + per_wall(u, g));
      } else {
        tp.line(u->ops_per_s > g->ops_per_s, cell + " ops/s: unipool " + fmt("%.2f", u->ops_per_s / 1e6) +
                                                 " M; glibc " + fmt("%.2f", g->ops_per_s / 1e6) + " M" + per_cpu(u, g));
      }
      tp.line(u->page_faults <= g->page_faults, cell + " page faults: unipool " + std::to_string(u->page_faults) +
                                                    "; glibc " + std::to_string(g->page_faults));
    }
  }
}

}  // namespace

void print_header(std::ostream& out, const ReportContext& ctx) {
  utsname u{};
  uname(&u);
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  out << "# bench/host: host allocators on the RL, hakmem, rpmalloc and mid-range workloads\n\n"
      << "- command: `" << ctx.command << "`\n"
      << "- date: " << date << "; " << cpu_model() << ", " << sysconf(_SC_NPROCESSORS_ONLN) << " CPUs, " << u.sysname
      << " " << u.release << "; load average at start " << fmt("%.2f", load) << "\n"
      << "- mode: " << (ctx.quick ? "quick (counts / 50)" : "full") << "; runs per cell: " << ctx.repeat
      << " (the median by ops per CPU-second is shown); worker threads "
      << (ctx.pin ? "pinned (thread t on the t-th CPU, modulo the CPU count)" : "not pinned (--no-pin)") << "\n"
      << "- every allocator runs this same binary in its own process; all but glibc through LD_PRELOAD:\n";
  for (const auto& p : ctx.peers) {
    out << "  - " << p.name << ": "
        << (p.preload.empty() ? (p.available ? std::string("no preload (the C library)") : p.missing_reason)
                              : p.preload + (p.available ? "" : " (" + p.missing_reason + ", skipped)"))
        << (p.unipool_conf.empty() ? "" : "; UNIPOOL_HOST_CONF=" + p.unipool_conf) << "\n";
  }
  out << "- latencies: one call in 32 timed with the TSC (every call in hakmem_*); each includes the timer's own "
      << fmt("%.0f", timer_overhead_ns()) << " ns\n\n";
}

void print_tables(std::ostream& out, const std::vector<CellResult>& results,
                  const std::vector<std::string>& workloads) {
  for (const auto& w : workloads) {
    out << "## " << w << "\n\n";
    if (w == "rpmalloc_random") {
      print_thread_cache_study(out, results, w);
    } else {
      print_general(out, results, w);
    }
    out << "\n";
    print_variants(out, results, w);
  }
}

void print_targets(std::ostream& out, const std::vector<CellResult>& results) {
  out << "## Targets\n\n";
  TargetPrinter tp{out};
  throughput_targets(tp, results);
  handoff_targets(tp, results);
  study_targets(tp, results);
  hakmem_targets(tp, results);
  if (tp.met + tp.missed == 0) {
    out << "(no unipool results: nothing to judge)\n\n";
    return;
  }
  out << "\n" << tp.met << " met, " << tp.missed << " missed\n\n";
}

nlohmann::json to_json(const std::vector<CellResult>& results) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : results) list.push_back(to_json(r));
  return list;
}

}  // namespace host_bench
