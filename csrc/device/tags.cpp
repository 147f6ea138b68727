// unipool device pool: the process-wide tag names and the thread's current tag.
#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "unipool/device_error.hpp"
#include "unipool/device_tags.hpp"

namespace unipool {

namespace {

constexpr size_t kMaxTagName = 64;

// Names are appended, never removed: a tag's number is stable for the
// process, so pools and their snapshots can keep the number alone.
struct TagNames {
  std::mutex mutex;
  std::array<std::string, kMaxDeviceTags> names{"default"};
  std::atomic<unsigned> count{1};  // written under the mutex, read without it by device_tag_made

  int find_locked(std::string_view name) const {
    for (unsigned i = 0; i < count; ++i) {
      if (names[i] == name) return static_cast<int>(i);
    }
    return -1;
  }
};

TagNames& tag_names() {
  static TagNames* names = new TagNames();  // never destroyed: used by pools freed at exit
  return *names;
}

thread_local DeviceTag t_current = kDefaultDeviceTag;

}  // namespace

DeviceTag device_tag(std::string_view name) {
  if (name.empty() || name.size() > kMaxTagName) {
    throw DevicePoolError(Status::bad_argument, "unipool: a device tag name must have 1 to 64 characters, got \"" +
                                                    std::string(name.substr(0, kMaxTagName)) + "\"");
  }
  TagNames& t = tag_names();
  std::lock_guard lock(t.mutex);
  if (const int found = t.find_locked(name); found >= 0) return static_cast<DeviceTag>(found);
  if (t.count == kMaxDeviceTags) {
    throw DevicePoolError(Status::bad_argument, "unipool: too many device tags (at most " +
                                                    std::to_string(kMaxDeviceTags) + "); cannot add \"" +
                                                    std::string(name) + "\"");
  }
  const unsigned n = t.count.load(std::memory_order_relaxed);
  t.names[n] = std::string(name);
  t.count.store(n + 1, std::memory_order_release);
  return static_cast<DeviceTag>(n);
}

bool find_device_tag(std::string_view name, DeviceTag* tag) noexcept {
  TagNames& t = tag_names();
  std::lock_guard lock(t.mutex);
  const int found = t.find_locked(name);
  if (found < 0) return false;
  if (tag != nullptr) *tag = static_cast<DeviceTag>(found);
  return true;
}

std::string device_tag_name(DeviceTag tag) {
  TagNames& t = tag_names();
  std::lock_guard lock(t.mutex);
  return tag < t.count ? t.names[tag] : std::string();
}

bool device_tag_made(DeviceTag tag) noexcept { return tag < tag_names().count.load(std::memory_order_acquire); }

DeviceTag current_device_tag() noexcept { return t_current; }

DeviceTag set_current_device_tag(DeviceTag tag) {
  if (!device_tag_made(tag)) {
    throw DevicePoolError(Status::bad_argument,
                          "unipool: device tag " + std::to_string(tag) + " was never made by device_tag()");
  }
  const DeviceTag previous = t_current;
  t_current = tag;
  return previous;
}

}  // namespace unipool
