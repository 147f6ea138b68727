// unipool C ABI: the device pool. Exceptions stop here: each call turns them
// into a status and the thread's last error message.
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "capi/last_error.hpp"
#include "unipool/c/device.h"
#include "unipool/device_pool.hpp"

struct unipool_device_pools {
  explicit unipool_device_pools(std::unique_ptr<unipool::DevicePools> p) : pools(std::move(p)) {}
  std::unique_ptr<unipool::DevicePools> pools;
};

namespace {

using unipool::DevicePoolError;

unipool_status_t to_c(unipool::Status s) { return static_cast<unipool_status_t>(s); }

// Runs f, mapping exceptions to a status and the last error.
template <class F>
unipool_status_t guarded(F&& f) {
  try {
    unipool::capi::clear_last_error();
    f();
    return UNIPOOL_OK;
  } catch (const DevicePoolError& e) {
    unipool::capi::set_last_error(e.what());
    return to_c(e.status());
  } catch (const std::bad_alloc&) {
    unipool::capi::set_last_error("unipool: host memory exhausted");
    return UNIPOOL_OUT_OF_SPACE;
  } catch (const std::exception& e) {
    unipool::capi::set_last_error(e.what());
    return UNIPOOL_BAD_ARGUMENT;
  }
}

// The default pools: built once, on first use, from UNIPOOL_DEVICE_CONF, and
// never destroyed (other static destructors may still free into them).
unipool_device_pools* default_pools() {
  static std::once_flag once;
  static unipool_device_pools* pools = nullptr;
  static std::string error;
  std::call_once(once, [] {
    try {
      auto p = std::make_unique<unipool::DevicePools>(unipool::DevicePoolConfig::from_env());
      pools = new unipool_device_pools(std::move(p));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (pools == nullptr) unipool::capi::set_last_error(error);
  return pools;
}

unipool::DevicePools* resolve(unipool_device_pools_t* pools) {
  unipool_device_pools* p = pools != nullptr ? pools : default_pools();
  if (p == nullptr) throw DevicePoolError(unipool::Status::bad_argument, unipool::capi::last_error());
  return p->pools.get();
}

// f(pool) for one device, or for each when device is -1.
template <class F>
void each_device(unipool::DevicePools& pools, int device, F&& f) {
  if (device == -1) {
    for (int d = 0; d < pools.device_count(); ++d) f(pools.pool(d));
  } else {
    f(pools.pool(device));
  }
}

const std::vector<std::string>& stat_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    unipool::DeviceStats{}.for_each([&](const std::string& key, int64_t) { k.push_back(key); });
    return k;
  }();
  return keys;
}

// snprintf's contract: at most `capacity` bytes with the NUL; the full length.
size_t copy_out(const std::string& text, char* buffer, size_t capacity) {
  if (buffer != nullptr && capacity > 0) {
    const size_t n = text.size() < capacity - 1 ? text.size() : capacity - 1;
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  }
  return text.size();
}

// A C array of tag names; NULL only with count 0.
std::vector<std::string> names(const char* const* tags, size_t count, const char* what) {
  if (tags == nullptr && count != 0) {
    throw DevicePoolError(unipool::Status::bad_argument,
                          std::string("unipool: ") + what + " is NULL with a count of " + std::to_string(count));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    if (tags[i] == nullptr) {
      throw DevicePoolError(unipool::Status::bad_argument,
                            std::string("unipool: ") + what + "[" + std::to_string(i) + "] is NULL");
    }
    out.emplace_back(tags[i]);
  }
  return out;
}

// Fills what the caller's struct holds (its `size` says how much).
void fill(unipool_device_sleep_result_t* out, const unipool::DeviceSleepResult& r) {
  if (out == nullptr) return;
  unipool_device_sleep_result_t full{sizeof full, r.offloaded_bytes, r.discarded_bytes, r.released_bytes, r.seconds};
  const size_t n = out->size < sizeof full ? out->size : sizeof full;
  if (n > sizeof full.size)
    std::memcpy(reinterpret_cast<char*>(out) + sizeof full.size,
                reinterpret_cast<const char*>(&full) + sizeof full.size, n - sizeof full.size);
}

std::string tag_json(const unipool::DeviceTagStats& t, int device) {
  std::string s = "{";
  if (device >= 0) s += "\"device\": " + std::to_string(device) + ", ";
  s += "\"tag\": \"" + t.tag + "\", \"state\": \"" + t.state + "\"";
  for (const auto& [key, value] : {std::pair<const char*, uint64_t>{"allocated_bytes", t.allocated_bytes},
                                   {"blocks", t.blocks},
                                   {"reserved_bytes", t.reserved_bytes},
                                   {"offloaded_bytes", t.offloaded_bytes},
                                   {"discarded_bytes", t.discarded_bytes},
                                   {"released_bytes", t.released_bytes},
                                   {"host_bytes", t.host_bytes},
                                   {"sleeps", t.sleeps},
                                   {"wakes", t.wakes}}) {
    s += std::string(", \"") + key + "\": " + std::to_string(value);
  }
  s += ", \"last_sleep_seconds\": " + std::to_string(t.last_sleep_seconds);
  s += ", \"last_wake_seconds\": " + std::to_string(t.last_wake_seconds) + "}";
  return s;
}

}  // namespace

extern "C" {

unipool_status_t unipool_device_pools_create(const char* config, unipool_device_pools_t** out) {
  if (out == nullptr) {
    unipool::capi::set_last_error("unipool_device_pools_create: out is NULL");
    return UNIPOOL_BAD_ARGUMENT;
  }
  *out = nullptr;
  return guarded([&] {
    auto p = unipool::DevicePools::create(config == nullptr ? "" : config);
    *out = new unipool_device_pools(std::move(p));
  });
}

void unipool_device_pools_destroy(unipool_device_pools_t* pools) { delete pools; }

unipool_device_pools_t* unipool_device_default(void) { return default_pools(); }

int unipool_device_count(unipool_device_pools_t* pools) {
  int n = 0;
  guarded([&] { n = resolve(pools)->device_count(); });
  return n;
}

unipool_status_t unipool_device_alloc(unipool_device_pools_t* pools, size_t size, int device, void* stream,
                                      void** out) {
  if (out == nullptr) {
    unipool::capi::set_last_error("unipool_device_alloc: out is NULL");
    return UNIPOOL_BAD_ARGUMENT;
  }
  *out = nullptr;
  return guarded(
      [&] { *out = resolve(pools)->allocate(size, device, reinterpret_cast<unipool::StreamHandle>(stream)); });
}

unipool_status_t unipool_device_free(unipool_device_pools_t* pools, void* ptr) {
  return guarded([&] { resolve(pools)->deallocate(ptr); });
}

unipool_status_t unipool_device_free_on(unipool_device_pools_t* pools, void* ptr, int device) {
  return guarded([&] { resolve(pools)->deallocate(ptr, device); });
}

unipool_status_t unipool_device_record_stream(unipool_device_pools_t* pools, void* ptr, void* stream) {
  return guarded([&] { resolve(pools)->record_stream(ptr, reinterpret_cast<unipool::StreamHandle>(stream)); });
}

unipool_status_t unipool_device_empty_cache(unipool_device_pools_t* pools, int device) {
  return guarded([&] { each_device(*resolve(pools), device, [](unipool::DevicePool& p) { p.empty_cache(); }); });
}

unipool_status_t unipool_device_stat(unipool_device_pools_t* pools, int device, const char* key, int64_t* value) {
  return guarded([&] {
    if (key == nullptr || value == nullptr) {
      throw DevicePoolError(unipool::Status::bad_argument, "unipool_device_stat: null key or value");
    }
    const auto v = resolve(pools)->pool(device).stats().get(key);
    if (!v) {
      throw DevicePoolError(unipool::Status::bad_argument,
                            std::string("unipool_device_stat: unknown key '") + key + "'");
    }
    *value = *v;
  });
}

const char* unipool_device_stat_key(size_t index) {
  const auto& keys = stat_keys();
  return index < keys.size() ? keys[index].c_str() : nullptr;
}

unipool_status_t unipool_device_reset_peak_stats(unipool_device_pools_t* pools, int device) {
  return guarded([&] { each_device(*resolve(pools), device, [](unipool::DevicePool& p) { p.reset_peak_stats(); }); });
}

unipool_status_t unipool_device_reset_accumulated_stats(unipool_device_pools_t* pools, int device) {
  return guarded([&] {
    each_device(*resolve(pools), device, [](unipool::DevicePool& p) { p.reset_accumulated_stats(); });
  });
}

size_t unipool_device_snapshot_json(unipool_device_pools_t* pools, int device, char* buffer, size_t capacity) {
  std::string json;
  const unipool_status_t s = guarded([&] {
    unipool::DevicePools& p = *resolve(pools);
    json = device == -1 ? p.snapshot_json() : p.pool(device).snapshot_json();
  });
  return s == UNIPOOL_OK ? copy_out(json, buffer, capacity) : 0;
}

unipool_status_t unipool_device_set_tag(const char* tag) {
  return guarded(
      [&] { unipool::set_current_device_tag(tag == nullptr ? unipool::kDefaultDeviceTag : unipool::device_tag(tag)); });
}

unipool_status_t unipool_device_sleep(unipool_device_pools_t* pools, const char* const* offload, size_t offload_count,
                                      const char* const* discard, size_t discard_count,
                                      unipool_device_sleep_result_t* result) {
  return guarded([&] {
    unipool::DeviceSleepRequest request{names(offload, offload_count, "offload"),
                                        names(discard, discard_count, "discard")};
    fill(result, resolve(pools)->sleep(request));
  });
}

unipool_status_t unipool_device_wake(unipool_device_pools_t* pools, const char* const* tags, size_t count,
                                     unipool_device_sleep_result_t* result) {
  return guarded([&] { fill(result, resolve(pools)->wake(names(tags, count, "tags"))); });
}

size_t unipool_device_tag_stats_json(unipool_device_pools_t* pools, int device, char* buffer, size_t capacity) {
  std::string json = "[";
  const unipool_status_t s = guarded([&] {
    unipool::DevicePools& p = *resolve(pools);
    if (device != -1) (void)p.pool(device);  // the bad-device error
    for (int d = 0; d < p.device_count(); ++d) {
      if (device != -1 && d != device) continue;
      for (const unipool::DeviceTagStats& t : p.pool(d).tag_stats()) {
        if (json.size() > 1) json += ", ";
        json += tag_json(t, device == -1 ? d : -1);
      }
    }
  });
  json += "]";
  return s == UNIPOOL_OK ? copy_out(json, buffer, capacity) : 0;
}

unipool_status_t unipool_device_set_memory_fraction(unipool_device_pools_t* pools, int device, double fraction) {
  return guarded([&] {
    each_device(*resolve(pools), device, [&](unipool::DevicePool& p) { p.set_memory_fraction(fraction); });
  });
}

unipool_status_t unipool_device_set_memory_limit(unipool_device_pools_t* pools, int device, uint64_t bytes) {
  return guarded([&] {
    each_device(*resolve(pools), device, [&](unipool::DevicePool& p) { p.set_memory_limit(bytes); });
  });
}

unipool_status_t unipool_device_validate(unipool_device_pools_t* pools) {
  return guarded([&] {
    std::string why;
    if (!resolve(pools)->validate(&why)) throw DevicePoolError(unipool::Status::bad_argument, why);
  });
}

}  // extern "C"
