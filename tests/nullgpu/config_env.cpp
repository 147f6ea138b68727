// unipool null GPU: the UNIPOOL_NULLGPU environment variable (nullgpu.hpp,
// parse_config), which configures the preloaded shared library.
#include <charconv>
#include <set>
#include <stdexcept>
#include <string>

#include "nullgpu/nullgpu.hpp"

namespace unipool::nullgpu {
namespace {

[[noreturn]] void bad(std::string_view key, std::string_view value, const char* why) {
  throw std::invalid_argument("UNIPOOL_NULLGPU: " + std::string(key) + "=" + std::string(value) + ": " + why);
}

uint64_t parse_count(std::string_view key, std::string_view value) {
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc{} || end != value.data() + value.size()) bad(key, value, "not a whole number");
  return n;
}

uint64_t parse_bytes(std::string_view key, std::string_view value) {
  static constexpr std::pair<std::string_view, int> kSuffixes[] = {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
  for (const auto& [suffix, shift] : kSuffixes) {
    if (value.size() > suffix.size() && value.substr(value.size() - suffix.size()) == suffix) {
      const uint64_t n = parse_count(key, value.substr(0, value.size() - suffix.size()));
      if (n > (UINT64_MAX >> shift)) bad(key, value, "too large");
      return n << shift;
    }
  }
  return parse_count(key, value);
}

bool parse_switch(std::string_view key, std::string_view value) {
  if (value == "on") return true;
  if (value == "off") return false;
  bad(key, value, "expected on or off");
}

int parse_int(std::string_view key, std::string_view value, int max) {
  const uint64_t n = parse_count(key, value);
  if (n > static_cast<uint64_t>(max)) bad(key, value, "too large");
  return static_cast<int>(n);
}

// FUNCTION:NTH[:CODE][:sticky]
Fault parse_fault(std::string_view value) {
  Fault fault;
  std::vector<std::string_view> parts;
  for (size_t at = 0; at <= value.size();) {
    const size_t colon = std::min(value.find(':', at), value.size());
    parts.push_back(value.substr(at, colon - at));
    at = colon + 1;
  }
  if (parts.size() < 2 || parts.size() > 4 || parts[0].empty()) bad("fault", value, "expected FUNCTION:NTH[:CODE][:sticky]");
  fault.function = std::string(parts[0]);
  fault.nth = parse_count("fault", parts[1]);
  if (fault.nth == 0) bad("fault", value, "NTH counts from 1");
  for (size_t i = 2; i < parts.size(); ++i) {
    if (parts[i] == "sticky") {
      fault.sticky = true;
    } else if (i == 2) {
      fault.code = parse_int("fault", parts[i], 100000);
    } else {
      bad("fault", value, "expected FUNCTION:NTH[:CODE][:sticky]");
    }
  }
  return fault;
}

void parse_compute_capability(Config& c, std::string_view value) {
  const size_t dot = value.find('.');
  if (dot == std::string_view::npos) bad("compute_capability", value, "expected MAJOR.MINOR");
  c.compute_major = parse_int("compute_capability", value.substr(0, dot), 99);
  c.compute_minor = parse_int("compute_capability", value.substr(dot + 1), 9);
}

void apply(EnvironmentConfig& out, std::string_view key, std::string_view value) {
  Config& c = out.config;
  if (key == "devices") c.device_count = parse_int(key, value, 64);
  else if (key == "capacity") c.capacity = parse_bytes(key, value);
  else if (key == "granularity") c.granularity = parse_bytes(key, value);
  else if (key == "compute_capability") parse_compute_capability(c, value);
  else if (key == "sm_count") c.sm_count = parse_int(key, value, 100000);
  else if (key == "event_lag") c.event_lag = value == "never" ? kUnlimited : parse_count(key, value);
  else if (key == "pinned_limit") c.pinned_limit = parse_bytes(key, value);
  else if (key == "byte_limit") out.byte_limit = parse_bytes(key, value);
  else if (key == "vmm") c.vmm_supported = parse_switch(key, value);
  else if (key == "huge_pages") c.huge_pages = parse_switch(key, value);
  else if (key == "ipc")
    c.ipc = parse_switch(key, value);
  else if (key == "driver") c.driver_present = parse_switch(key, value);
  else if (key == "fault") out.faults.push_back(parse_fault(value));
  else bad(key, value, "unknown key");
}

void check(const EnvironmentConfig& out) {
  const Config& c = out.config;
  if (c.granularity == 0 || (c.granularity & (c.granularity - 1)) != 0) {
    bad("granularity", std::to_string(c.granularity), "must be a power of two");
  }
  if (c.event_lag == 0) bad("event_lag", "0", "an event completes on query 1 at the earliest");
}

}  // namespace

Config shared_library_defaults() {
  Config c;
  c.capacity = uint64_t{80} << 30;
  c.event_lag = 2;
  c.runtime_version = 13020;
  c.driver_version = 13020;
  return c;
}

EnvironmentConfig parse_config(std::string_view text, const Config& base) {
  EnvironmentConfig out{base, {}, kUnlimited};
  std::set<std::string, std::less<>> seen;
  for (size_t at = 0; at < text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, comma - at);
    at = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad(item, "", "expected key=value");
    const std::string_view key = item.substr(0, eq);
    if (key != "fault" && !seen.emplace(key).second) bad(key, item.substr(eq + 1), "given twice");
    apply(out, key, item.substr(eq + 1));
  }
  check(out);
  return out;
}

}  // namespace unipool::nullgpu
