// unipool: tags on device blocks ("weights", "kv_cache", "cuda_graph", ...),
// what DevicePool::sleep() and wake() act on.
//
//   {
//     unipool::DeviceTagScope scope("weights");   // this thread, until scope ends
//     w = pools->allocate(bytes, 0, stream);     // a "weights" block
//   }
//
// Every block carries the tag that was current on its thread when it was
// allocated ("default" unless set). Blocks of different tags never share a
// segment or a granule, so one tag's memory can be unmapped without touching
// another's. A tag is a small number interned process-wide from its name;
// there are at most kMaxDeviceTags of them, "default" included.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace unipool {

using DeviceTag = uint8_t;
inline constexpr DeviceTag kDefaultDeviceTag = 0;  // "default"
inline constexpr unsigned kMaxDeviceTags = 64;

// The tag of `name`, made on first use. Throws DevicePoolError(bad_argument)
// for an empty name, a name over 64 characters, or a 65th tag.
DeviceTag device_tag(std::string_view name);
// The tag of `name` if it exists; false otherwise (nothing is made).
bool find_device_tag(std::string_view name, DeviceTag* tag) noexcept;
// Whether device_tag() handed out this number (no lock).
bool device_tag_made(DeviceTag tag) noexcept;
// The name of a tag made by device_tag(); "" for a number never handed out.
std::string device_tag_name(DeviceTag tag);

// The calling thread's tag for new blocks.
DeviceTag current_device_tag() noexcept;
// Sets it, returning the previous one (for a caller that keeps a stack, as
// the Python context manager does). Throws DevicePoolError(bad_argument) for
// a number device_tag() never handed out.
DeviceTag set_current_device_tag(DeviceTag tag);

// Sets the calling thread's tag for the scope's lifetime, then restores it.
class DeviceTagScope {
 public:
  explicit DeviceTagScope(std::string_view name) : previous_(set_current_device_tag(device_tag(name))) {}
  explicit DeviceTagScope(DeviceTag tag) : previous_(set_current_device_tag(tag)) {}
  ~DeviceTagScope() { set_current_device_tag(previous_); }  // previous_ is valid: no throw
  DeviceTagScope(const DeviceTagScope&) = delete;
  DeviceTagScope& operator=(const DeviceTagScope&) = delete;

 private:
  DeviceTag previous_;
};

}  // namespace unipool
