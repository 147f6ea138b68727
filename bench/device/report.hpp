// bench/device: tables, the targets, and the JSON file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "peers.hpp"
#include "replay.hpp"

namespace device_bench {

struct HotPath {
  std::string allocator;
  uint64_t bytes;
  double ns_per_op;
};

struct Target {
  std::string name;
  bool met;
  std::string detail;  // the numbers behind it
};

void print_trace_table(const std::vector<Result>& results, const std::string& trace);
void print_hot_path_table(const std::vector<HotPath>& hot);
std::vector<Target> evaluate_targets(const std::vector<Result>& results, const std::vector<HotPath>& hot);
void print_targets(const std::vector<Target>& targets);
nlohmann::json to_json(const std::vector<PeerInfo>& peers, const std::vector<Result>& results, const std::vector<HotPath>& hot,
                       const std::vector<Target>& targets, bool quick);

}  // namespace device_bench
