// unipool device pool: stats by PyTorch key ("reserved_bytes.large_pool.peak").
#include <string>

#include "unipool/device_stats.hpp"

namespace unipool {

namespace {

struct Named {
  const char* name;
  DeviceStatArray DeviceStats::*array;
};
constexpr Named kArrays[] = {
    {"allocation", &DeviceStats::allocation},
    {"segment", &DeviceStats::segment},
    {"active", &DeviceStats::active},
    {"inactive_split", &DeviceStats::inactive_split},
    {"allocated_bytes", &DeviceStats::allocated_bytes},
    {"reserved_bytes", &DeviceStats::reserved_bytes},
    {"active_bytes", &DeviceStats::active_bytes},
    {"inactive_split_bytes", &DeviceStats::inactive_split_bytes},
    {"requested_bytes", &DeviceStats::requested_bytes},
};
constexpr const char* kPools[] = {"all", "small_pool", "large_pool"};
constexpr const char* kFields[] = {"current", "peak", "allocated", "freed"};

struct Counter {
  const char* name;
  int64_t DeviceStats::*value;
};
constexpr Counter kCounters[] = {
    {"num_alloc_retries", &DeviceStats::num_alloc_retries},
    {"num_ooms", &DeviceStats::num_ooms},
    {"num_sync_all_streams", &DeviceStats::num_sync_all_streams},
    {"num_device_alloc", &DeviceStats::num_device_alloc},
    {"num_device_free", &DeviceStats::num_device_free},
};

int64_t field_of(const DeviceStat& s, size_t field) {
  switch (field) {
    case 0: return s.current;
    case 1: return s.peak;
    case 2: return s.allocated;
    default: return s.freed;
  }
}

}  // namespace

void DeviceStats::for_each(const std::function<void(const std::string&, int64_t)>& f) const {
  for (const Named& n : kArrays) {
    for (size_t p = 0; p < 3; ++p) {
      for (size_t field = 0; field < 4; ++field) {
        f(std::string(n.name) + "." + kPools[p] + "." + kFields[field], field_of((this->*n.array)[p], field));
      }
    }
  }
  for (const Counter& c : kCounters) f(c.name, this->*c.value);
}

std::optional<int64_t> DeviceStats::get(std::string_view key) const {
  for (const Counter& c : kCounters) {
    if (key == c.name) return this->*c.value;
  }
  const size_t dot1 = key.find('.');
  const size_t dot2 = dot1 == std::string_view::npos ? dot1 : key.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos) return std::nullopt;
  const std::string_view name = key.substr(0, dot1);
  const std::string_view pool = key.substr(dot1 + 1, dot2 - dot1 - 1);
  const std::string_view field = key.substr(dot2 + 1);
  for (const Named& n : kArrays) {
    if (name != n.name) continue;
    for (size_t p = 0; p < 3; ++p) {
      if (pool != kPools[p]) continue;
      for (size_t fi = 0; fi < 4; ++fi) {
        if (field == kFields[fi]) return field_of((this->*n.array)[p], fi);
      }
    }
  }
  return std::nullopt;
}

}  // namespace unipool
