// unipool device pool: parsing UNIPOOL_DEVICE_CONF-style strings. Every error
// names the key and says what was expected.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/align.hpp"
#include "unipool/device_config.hpp"
#include "unipool/device_error.hpp"

namespace unipool {

namespace {

[[noreturn]] void bad(std::string_view key, std::string_view value, const char* expected) {
  throw DevicePoolError(Status::bad_argument, "unipool: UNIPOOL_DEVICE_CONF key '" + std::string(key) +
                                                  "': value '" + std::string(value) + "' is not " + expected);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

double parse_number(std::string_view key, std::string_view value, std::string_view* rest, const char* expected) {
  const std::string text(value);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || errno != 0 || !std::isfinite(v) || v < 0) bad(key, value, expected);
  *rest = value.substr(static_cast<size_t>(end - text.c_str()));
  return v;
}

// "4096", "64MiB", "1.5G", "2 GB": 1024-based units.
uint64_t parse_size(std::string_view key, std::string_view value) {
  constexpr const char* expected = "a size (a number with an optional K, M, G or T suffix)";
  std::string_view unit;
  const double v = parse_number(key, value, &unit, expected);
  unit = trim(unit);
  double scale = 1;
  if (!unit.empty()) {
    const char u = unit.front();
    const std::string_view tail = unit.substr(1);
    if (!(tail.empty() || tail == "B" || tail == "iB")) bad(key, value, expected);
    switch (u) {
      case 'B': if (!tail.empty()) bad(key, value, expected); break;
      case 'K': case 'k': scale = 0x1p10; break;
      case 'M': case 'm': scale = 0x1p20; break;
      case 'G': case 'g': scale = 0x1p30; break;
      case 'T': case 't': scale = 0x1p40; break;
      default: bad(key, value, expected);
    }
  }
  const double bytes = v * scale;
  if (bytes >= 0x1p62) bad(key, value, "a size below 2^62 bytes");
  return static_cast<uint64_t>(bytes);
}

double parse_fraction(std::string_view key, std::string_view value, bool zero_ok) {
  std::string_view rest;
  const double v = parse_number(key, value, &rest, "a number in (0, 1]");
  if (!trim(rest).empty() || v > 1.0 || (!zero_ok && v <= 0.0)) bad(key, value, "a number in (0, 1]");
  return v;
}

bool parse_bool(std::string_view key, std::string_view value) {
  if (value == "true" || value == "True" || value == "1" || value == "on") return true;
  if (value == "false" || value == "False" || value == "0" || value == "off") return false;
  bad(key, value, "true or false");
}

void apply(DevicePoolConfig& c, std::string_view key, std::string_view value) {
  if (key == "backend") {
    if (value != "sim" && value != "cuda_malloc" && value != "cuda_vmm" && value != "nccl") {
      bad(key, value, "one of sim, cuda_malloc, cuda_vmm, nccl");
    }
    c.backend = std::string(value);
  } else if (key == "memory_fraction") {
    c.memory_fraction = parse_fraction(key, value, false);
  } else if (key == "memory_limit") {
    // 0 means "no limit": a value that rounds down to it (0.5, 0) is refused
    // rather than silently lifting the limit; leaving the key out says none.
    c.memory_limit = parse_size(key, value);
    if (c.memory_limit == 0) bad(key, value, "a size of at least 1 byte (leave the key out for no limit)");
  } else if (key == "max_split_size_mb") {
    std::string_view rest;
    const double mb = parse_number(key, value, &rest, "a number of MiB, at least 20");
    if (!trim(rest).empty() || mb < 20 || mb >= 0x1p42) bad(key, value, "a number of MiB, at least 20");
    c.max_split_size = static_cast<uint64_t>(mb * 0x1p20);
  } else if (key == "garbage_collection_threshold") {
    const double v = parse_fraction(key, value, false);
    if (v >= 1.0) bad(key, value, "a number in (0, 1)");
    c.garbage_collection_threshold = v;
  } else if (key == "release_threshold") {
    c.release_threshold = parse_size(key, value);
  } else if (key == "expandable_segments") {
    c.expandable_segments = parse_bool(key, value) ? 1 : 0;
  } else if (key == "sim_capacity") {
    c.sim_capacity = parse_size(key, value);
    if (c.sim_capacity < (uint64_t{2} << 20)) bad(key, value, "a size of at least 2 MiB");
  } else if (key == "sim_devices") {
    std::string_view rest;
    const double n = parse_number(key, value, &rest, "a device count in 1..64");
    if (!trim(rest).empty() || n < 1 || n > 64 || n != std::floor(n)) bad(key, value, "a device count in 1..64");
    c.sim_devices = static_cast<int>(n);
  } else if (key == "sim_granularity") {
    c.sim_granularity = parse_size(key, value);
    const uint64_t g = c.sim_granularity;
    if (g < 4096 || !is_power_of_two(g)) bad(key, value, "a power of two of at least 4 KiB");
  } else if (key == "sim_accessible") {
    c.sim_accessible = parse_bool(key, value);
  } else {
    throw DevicePoolError(Status::bad_argument,
                          "unipool: UNIPOOL_DEVICE_CONF: unknown key '" + std::string(key) +
                              "' (known: backend, memory_fraction, memory_limit, max_split_size_mb, "
                              "garbage_collection_threshold, release_threshold, expandable_segments, "
                              "sim_capacity, sim_devices, sim_granularity, sim_accessible)");
  }
}

// Keys set so far; a second value for one is refused, as "the last wins"
// would silently drop the first. The views point into parse()'s text.
void note_key(std::vector<std::string_view>& seen, std::string_view key) {
  if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
    throw DevicePoolError(Status::bad_argument,
                          "unipool: UNIPOOL_DEVICE_CONF: key '" + std::string(key) + "' is given twice");
  }
  seen.push_back(key);
}

// Checks between keys, once all are read (either order works). A granule
// larger than the simulated device could never be mapped: every allocation
// would fail with a report that the device is free.
void check_sim(const DevicePoolConfig& c) {
  if (c.sim_granularity > c.sim_capacity) {
    throw DevicePoolError(Status::bad_argument,
                          "unipool: UNIPOOL_DEVICE_CONF key 'sim_granularity': value " +
                              std::to_string(c.sim_granularity) + " is larger than sim_capacity " +
                              std::to_string(c.sim_capacity));
  }
}

}  // namespace

DevicePoolConfig DevicePoolConfig::parse(std::string_view text) {
  DevicePoolConfig c;
  std::vector<std::string_view> seen;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw DevicePoolError(Status::bad_argument, "unipool: UNIPOOL_DEVICE_CONF item '" + std::string(item) +
                                                      "' is not key=value");
    }
    const std::string_view key = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    if (value.empty()) {
      throw DevicePoolError(Status::bad_argument,
                            "unipool: UNIPOOL_DEVICE_CONF key '" + std::string(key) + "' has no value");
    }
    note_key(seen, key);
    apply(c, key, value);
  }
  check_sim(c);
  return c;
}

DevicePoolConfig DevicePoolConfig::from_env() {
  const char* env = std::getenv("UNIPOOL_DEVICE_CONF");
  return env == nullptr ? DevicePoolConfig{} : parse(env);
}

std::string DevicePoolConfig::to_string() const {
  std::string s;
  auto add = [&](const std::string& item) { s += (s.empty() ? "" : ",") + item; };
  if (!backend.empty()) add("backend=" + backend);
  if (memory_fraction > 0) add("memory_fraction=" + std::to_string(memory_fraction));
  if (memory_limit > 0) add("memory_limit=" + std::to_string(memory_limit));
  if (max_split_size != ~uint64_t{0}) add("max_split_size_mb=" + std::to_string(max_split_size >> 20));
  if (garbage_collection_threshold > 0) {
    add("garbage_collection_threshold=" + std::to_string(garbage_collection_threshold));
  }
  if (release_threshold != ~uint64_t{0}) add("release_threshold=" + std::to_string(release_threshold));
  if (expandable_segments >= 0) add(std::string("expandable_segments=") + (expandable_segments ? "true" : "false"));
  add("sim_capacity=" + std::to_string(sim_capacity));
  add("sim_devices=" + std::to_string(sim_devices));
  add("sim_granularity=" + std::to_string(sim_granularity));
  return s;
}

}  // namespace unipool
