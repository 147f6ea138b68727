// offset_util: markdown tables on stdout and the --json document.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads.hpp"

namespace offset_util {

struct Results {
  std::vector<UniformResult> uniform;
  std::vector<RandomResult> random;
  std::vector<PairedResult> paired;
  std::vector<PairResult> pair;
};

void print_header(std::ostream& out, const RunConfig& cfg, const std::vector<PolicySpec>& policies);

// One table per size list and alignment, policies side by side.
void print_uniform_list(std::ostream& out, const SizeList& list, const Results& results,
                        const std::vector<PolicySpec>& policies);
// Per policy: sizes at the limit, worst gaps to the limit, mean ns.
void print_uniform_summary(std::ostream& out, const Results& results,
                           const std::vector<PolicySpec>& policies);
void print_random(std::ostream& out, const Results& results, const RunConfig& cfg);
void print_paired(std::ostream& out, const Results& results, const RunConfig& cfg);
void print_pair(std::ostream& out, const Results& results, const RunConfig& cfg);

// Mooncake allocator_bench's layout: one table per policy and section of its
// results page.
void print_mooncake_format(std::ostream& out, const Results& results, const std::vector<SizeList>& lists,
                           const std::vector<PolicySpec>& policies);

// unipool (align 1) against the benchmark's targets; PASS / MISS lines.
void print_targets(std::ostream& out, const Results& results);

// {"uniform": [...], "random": [...], "paired": [...], "pair": [...]}
nlohmann::json to_json(const Results& results);

}  // namespace offset_util
