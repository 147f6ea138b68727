// offset_util: the report. Tables are markdown so they paste into docs.
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

namespace offset_util {
namespace {

// Utilization to 6 decimals: enough to see a 1e-6 gap to the limit.
std::string util(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

std::string ns(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string bytes(uint64_t v) {
  if (v >= (uint64_t{1} << 40) && v % (uint64_t{1} << 40) == 0) return std::to_string(v >> 40) + " TiB";
  if (v >= (uint64_t{1} << 30) && v % (uint64_t{1} << 30) == 0) return std::to_string(v >> 30) + " GiB";
  if (v >= (uint64_t{1} << 20) && v % (uint64_t{1} << 20) == 0) return std::to_string(v >> 20) + " MiB";
  return std::to_string(v) + " B";
}

// allocator_bench's number style: ostream defaults (6 significant digits).
std::string plain(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A markdown table with columns padded to their widths.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  bool empty() const { return rows_.empty(); }

  void print(std::ostream& out) const {
    std::vector<size_t> width(header_.size(), 3);
    const auto widen = [&](const std::vector<std::string>& cells) {
      for (size_t i = 0; i < cells.size() && i < width.size(); ++i) {
        width[i] = std::max(width[i], cells[i].size());
      }
    };
    widen(header_);
    for (const auto& r : rows_) widen(r);
    const auto line = [&](const std::vector<std::string>& cells) {
      out << '|';
      for (size_t i = 0; i < width.size(); ++i) {
        const std::string& c = i < cells.size() ? cells[i] : std::string();
        out << ' ' << c << std::string(width[i] - c.size(), ' ') << " |";
      }
      out << '\n';
    };
    line(header_);
    out << '|';
    for (size_t w : width) out << std::string(w + 2, '-') << '|';
    out << '\n';
    for (const auto& r : rows_) line(r);
    out << '\n';
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

const UniformResult* find_uniform(const Results& results, const PolicySpec& spec, uint64_t size) {
  for (const auto& r : results.uniform) {
    if (r.policy == spec.name() && r.align == spec.align && r.size == size) return &r;
  }
  return nullptr;
}

template <class R>
const R* find_by_policy(const std::vector<R>& rows, const char* policy, uint64_t align) {
  for (const auto& r : rows) {
    if (r.policy == policy && r.align == align) return &r;
  }
  return nullptr;
}

std::vector<uint64_t> alignments_of(const std::vector<PolicySpec>& policies) {
  std::vector<uint64_t> aligns;
  for (const auto& p : policies) {
    if (std::find(aligns.begin(), aligns.end(), p.align) == aligns.end()) aligns.push_back(p.align);
  }
  return aligns;
}

std::string label(const std::string& policy, uint64_t align) {
  return align == 1 ? policy : policy + "@" + std::to_string(align);
}

}  // namespace

void print_header(std::ostream& out, const RunConfig& cfg, const std::vector<PolicySpec>& policies) {
  out << "# offset_util: range-allocator utilization (Mooncake allocator_bench's workloads)\n\n";
  out << "- mode: " << (cfg.quick ? "quick (reduced counts, smoke test)" : "full") << ", seed "
      << cfg.seed << (cfg.check ? ", allocator validated after every run" : "") << "\n";
  out << "- policies:";
  for (const auto& p : policies) out << ' ' << p.label();
  out << "\n";
  out << "  - unipool: unipool::RangeAllocator, exact sizes (@256: alignment 256)\n";
  out << "  - bin-roundup: classic OffsetAllocator, requests rounded up to the 3-bit-mantissa bin"
         " (Mooncake's \"after optimization\")\n";
  out << "  - exact: classic OffsetAllocator, exact sizes (Mooncake's \"before optimization\")\n";
  out << "- util = requested bytes of live objects / pool; ns = whole measured loop per call "
         "(evictions and sampling included), fastest of "
      << cfg.repeat << " run(s) per policy, run round-robin (util is deterministic)\n";
  out << "- uniform: " << cfg.uniform_calls << " measured calls after pool/size warm-up calls; pool "
      << bytes(cfg.uniform_pool) << " (" << bytes(cfg.uniform_small_pool) << " below "
      << cfg.uniform_small_below << " B); Limit = floor(P/s')*s/P, s' = s rounded up to the "
      << "alignment\n\n";
}

void print_uniform_list(std::ostream& out, const SizeList& list, const Results& results,
                        const std::vector<PolicySpec>& policies) {
  for (uint64_t align : alignments_of(policies)) {
    std::vector<PolicySpec> group;
    for (const auto& p : policies) {
      if (p.align == align) group.push_back(p);
    }
    std::vector<std::string> header = {"Alloc Size", "Pool",
                                       align == 1 ? "Limit" : "Limit (align " + std::to_string(align) + ")"};
    for (const auto& p : group) {
      header.push_back(p.label() + " Min");
      header.push_back(p.label() + " Avg");
      header.push_back(p.label() + " ns");
    }
    Table t(header);
    for (uint64_t size : list.sizes) {
      std::vector<std::string> row;
      for (const auto& p : group) {
        const UniformResult* r = find_uniform(results, p, size);
        if (row.empty()) {
          row = {std::to_string(size), r ? bytes(r->pool) : "", r ? util(r->limit) : ""};
        }
        row.push_back(r ? util(r->min_util) : "-");
        row.push_back(r ? util(r->avg_util) : "-");
        row.push_back(r ? ns(r->ns_per_op) : "-");
      }
      t.row(std::move(row));
    }
    out << "## Uniform size: " << list.title << (align == 1 ? "" : ", align " + std::to_string(align))
        << "\n\n";
    t.print(out);
  }
}

void print_uniform_summary(std::ostream& out, const Results& results,
                           const std::vector<PolicySpec>& policies) {
  Table t({"Policy", "Sizes", "At limit (1e-6)", "Worst limit-min", "at size", "Worst limit-avg",
           "at size", "Mean ns"});
  for (const auto& p : policies) {
    size_t count = 0, at_limit = 0;
    double worst_min = -1, worst_avg = -1, ns_sum = 0;
    uint64_t worst_min_size = 0, worst_avg_size = 0;
    for (const auto& r : results.uniform) {
      if (r.policy != p.name() || r.align != p.align) continue;
      ++count;
      ns_sum += r.ns_per_op;
      const double gmin = r.limit - r.min_util, gavg = r.limit - r.avg_util;
      if (std::fabs(gmin) <= 1e-6 && std::fabs(gavg) <= 1e-6) ++at_limit;
      if (gmin > worst_min) worst_min = gmin, worst_min_size = r.size;
      if (gavg > worst_avg) worst_avg = gavg, worst_avg_size = r.size;
    }
    if (count == 0) continue;
    t.row({p.label(), std::to_string(count), std::to_string(at_limit), util(worst_min),
           std::to_string(worst_min_size), util(worst_avg), std::to_string(worst_avg_size),
           ns(ns_sum / static_cast<double>(count))});
  }
  if (t.empty()) return;
  out << "## Uniform summary (gap to the limit; align 256 rows against their own limit)\n\n";
  t.print(out);
}

void print_random(std::ostream& out, const Results& results, const RunConfig& cfg) {
  if (results.random.empty()) return;
  out << "## Random size: uniform in [" << cfg.random_min << ", " << cfg.random_max << "], pool "
      << bytes(cfg.random_pool) << ", " << cfg.random_calls << " calls\n\n";
  out << "p1 / p10 are the values at 1% / 10% of the sorted samples (the low tail).\n\n";
  Table t({"Policy", "Min", "P1", "P10", "P50", "Max", "Avg", "ns/op", "evictions"});
  for (const auto& r : results.random) {
    t.row({label(r.policy, r.align), util(r.min), util(r.p1), util(r.p10), util(r.p50), util(r.max),
           util(r.avg), ns(r.ns_per_op), std::to_string(r.evictions)});
  }
  t.print(out);
}

void print_paired(std::ostream& out, const Results& results, const RunConfig& cfg) {
  if (results.paired.empty()) return;
  out << "## Paired KV/indexer: " << cfg.paired_kv << " B + " << cfg.paired_indexer << " B, pool "
      << bytes(cfg.paired_pool) << ", N~U[1," << cfg.paired_max_per_round << "] per round, "
      << cfg.paired_warmup_rounds << " warm-up + " << cfg.paired_rounds << " rounds, evict "
      << cfg.paired_evict_fraction * 100 << "% on failure\n\n";
  out << "util sampled just before each eviction.\n\n";
  Table t({"Policy", "Avg Util", "Min", "P1", "P50", "Max", "Samples", "ns/op", "ops"});
  for (const auto& r : results.paired) {
    t.row({label(r.policy, r.align), util(r.avg_util), util(r.min), util(r.p1), util(r.p50),
           util(r.max), std::to_string(r.samples), ns(r.ns_per_op), std::to_string(r.ops)});
  }
  t.print(out);
}

void print_pair(std::ostream& out, const Results& results, const RunConfig& cfg) {
  if (results.pair.empty()) return;
  out << "## alloc_free_pair: the allocator alone (ring of " << cfg.pair_live
      << " live allocations, free the oldest + allocate, sizes U[" << cfg.pair_min << ", "
      << cfg.pair_max << "] pre-generated, pool " << bytes(cfg.pair_pool) << ")\n\n";
  Table t({"Policy", "ns/pair", "pairs", "failures"});
  for (const auto& r : results.pair) {
    t.row({label(r.policy, r.align), ns(r.ns_per_pair), std::to_string(r.pairs),
           std::to_string(r.failures)});
  }
  t.print(out);
}

void print_mooncake_format(std::ostream& out, const Results& results, const std::vector<SizeList>& lists,
                           const std::vector<PolicySpec>& policies) {
  out << "# Tables in the layout of Mooncake allocator_bench's results\n\n";
  // Its three uniform sections: pow2; pow2 -/+ 17; x0.9 / x1.1.
  const std::vector<std::pair<std::string, std::vector<std::string>>> sections = {
      {"Uniform size, size equals power of 2", {"pow2"}},
      {"Uniform size, size equals power of 2 +/- 17", {"pow2-17", "pow2+17"}},
      {"Uniform size, size equals power of 2 multiply 0.9 or 1.1", {"x0.9", "x1.1"}},
  };
  for (const auto& [title, names] : sections) {
    bool any = false;
    std::ostringstream body;
    for (const auto& p : policies) {
      Table t({"Alloc Size", "Min Util Ratio", "Avg Util Ratio", "Time (ns)"});
      for (const auto& name : names) {
        for (const auto& list : lists) {
          if (list.name != name) continue;
          for (uint64_t size : list.sizes) {
            if (const UniformResult* r = find_uniform(results, p, size)) {
              t.row({std::to_string(size), plain(r->min_util), plain(r->avg_util),
                     std::to_string(static_cast<uint64_t>(r->ns_per_op))});
            }
          }
        }
      }
      if (t.empty()) continue;
      any = true;
      body << "**" << p.label() << "**\n\n";
      t.print(body);
    }
    if (any) out << "### " << title << "\n\n" << body.str();
  }
  if (!results.random.empty()) {
    out << "### Random Size\n\n";
    for (const auto& r : results.random) {
      char line[256];
      std::snprintf(line, sizeof line, "%.6f / %.6f / %.6f / %.6f / %.6f / %.6f", r.min, r.p1, r.p10,
                    r.p50, r.max, r.avg);
      char time[64];
      std::snprintf(time, sizeof time, "%.6f", r.ns_per_op);
      out << "**" << label(r.policy, r.align) << "**\n\n```\n"
          << "util ratio (min / p99 / p90 / p50 / max / avg):\n"
          << line << "\navg alloc time: " << time << " ns/op\n```\n\n";
    }
  }
}

void print_targets(std::ostream& out, const Results& results) {
  const char* us = "unipool";
  const char* peer = "bin-roundup";
  std::vector<std::string> lines;
  const auto verdict = [&](bool ok, const std::string& what) {
    lines.push_back(std::string(ok ? "PASS" : "MISS") + "  " + what);
  };

  // Uniform: min = avg = limit within 1e-6, align 1.
  size_t rows = 0;
  std::string off;
  for (const auto& r : results.uniform) {
    if (r.policy != us || r.align != 1) continue;
    ++rows;
    if (std::fabs(r.min_util - r.limit) > 1e-6 || std::fabs(r.avg_util - r.limit) > 1e-6) {
      off += " " + std::to_string(r.size) + "(min " + util(r.min_util) + ", avg " +
             util(r.avg_util) + ", limit " + util(r.limit) + ")";
    }
  }
  if (rows > 0) {
    verdict(off.empty(), "uniform: unipool min = avg = limit within 1e-6 on " + std::to_string(rows) +
                             " sizes" + (off.empty() ? "" : "; off:" + off));
  }
  if (const auto* r = find_by_policy(results.random, us, 1)) {
    verdict(r->avg >= 0.865, "random: unipool avg " + util(r->avg) + " >= 0.865");
    verdict(r->p1 >= 0.73, "random: unipool p1 " + util(r->p1) + " >= 0.73");
  }
  if (const auto* r = find_by_policy(results.paired, us, 1)) {
    verdict(r->avg_util >= 0.995, "paired: unipool avg " + util(r->avg_util) + " >= 0.995");
  }

  // Speed: unipool <= bin-roundup on every table. Uniform tables compare the
  // mean ns over the list (single rows are noisy); slower rows are listed.
  std::vector<std::string> list_names;
  for (const auto& r : results.uniform) {
    if (std::find(list_names.begin(), list_names.end(), r.list) == list_names.end()) {
      list_names.push_back(r.list);
    }
  }
  for (const auto& name : list_names) {
    double ours = 0, theirs = 0;
    size_t n = 0;
    std::string slower;
    for (const auto& a : results.uniform) {
      if (a.list != name || a.policy != us || a.align != 1) continue;
      for (const auto& b : results.uniform) {
        if (b.list != name || b.policy != peer || b.size != a.size) continue;
        ours += a.ns_per_op;
        theirs += b.ns_per_op;
        ++n;
        if (a.ns_per_op > b.ns_per_op) {
          slower += " " + std::to_string(a.size) + "(" + ns(a.ns_per_op) + " vs " + ns(b.ns_per_op) + ")";
        }
      }
    }
    if (n == 0) continue;
    const double mo = ours / static_cast<double>(n), mt = theirs / static_cast<double>(n);
    verdict(mo <= mt, "uniform " + name + " ns: unipool mean " + ns(mo) + " <= bin-roundup " + ns(mt) +
                          (slower.empty() ? "" : "; rows slower:" + slower));
  }
  const auto speed = [&](const std::string& table, const auto& rows_of, auto field) {
    const auto* a = find_by_policy(rows_of, us, 1);
    const auto* b = find_by_policy(rows_of, peer, 1);
    if (a && b) {
      verdict(field(*a) <= field(*b),
              table + " ns: unipool " + ns(field(*a)) + " <= bin-roundup " + ns(field(*b)));
    }
  };
  speed("random", results.random, [](const RandomResult& r) { return r.ns_per_op; });
  speed("paired", results.paired, [](const PairedResult& r) { return r.ns_per_op; });
  speed("alloc_free_pair", results.pair, [](const PairResult& r) { return r.ns_per_pair; });

  if (lines.empty()) return;
  out << "## Targets (unipool, align 1)\n\n";
  for (const auto& l : lines) out << "- " << l << '\n';
  out << '\n';
}

nlohmann::json to_json(const Results& results) {
  using nlohmann::json;
  json doc = {{"uniform", json::array()}, {"random", json::array()}, {"paired", json::array()},
              {"pair", json::array()}};
  for (const auto& r : results.uniform) {
    doc["uniform"].push_back({{"policy", r.policy},
                              {"align", r.align},
                              {"size", r.size},
                              {"min_util", r.min_util},
                              {"avg_util", r.avg_util},
                              {"ns_per_op", r.ns_per_op},
                              {"ns_runs", r.ns_runs},
                              {"limit", r.limit},
                              {"list", r.list},
                              {"pool", r.pool},
                              {"calls", r.calls},
                              {"evictions", r.evictions}});
  }
  for (const auto& r : results.random) {
    doc["random"].push_back({{"policy", r.policy},
                             {"align", r.align},
                             {"min", r.min},
                             {"p1", r.p1},
                             {"p10", r.p10},
                             {"p50", r.p50},
                             {"max", r.max},
                             {"avg", r.avg},
                             {"ns_per_op", r.ns_per_op},
                             {"ns_runs", r.ns_runs},
                             {"calls", r.calls},
                             {"evictions", r.evictions}});
  }
  for (const auto& r : results.paired) {
    doc["paired"].push_back({{"policy", r.policy},
                             {"align", r.align},
                             {"avg_util", r.avg_util},
                             {"ns_per_op", r.ns_per_op},
                             {"ns_runs", r.ns_runs},
                             {"min", r.min},
                             {"p1", r.p1},
                             {"p10", r.p10},
                             {"p50", r.p50},
                             {"max", r.max},
                             {"samples", r.samples},
                             {"ops", r.ops},
                             {"pool", r.pool},
                             {"evictions", r.evictions}});
  }
  for (const auto& r : results.pair) {
    doc["pair"].push_back({{"policy", r.policy},
                           {"align", r.align},
                           {"ns_per_pair", r.ns_per_pair},
                           {"ns_runs", r.ns_runs},
                           {"pairs", r.pairs},
                           {"failures", r.failures},
                           {"live", r.live}});
  }
  return doc;
}

}  // namespace offset_util
