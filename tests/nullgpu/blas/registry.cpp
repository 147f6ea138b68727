// unipool null GPU, cuBLAS: the registry of live handles and cuBLASLt
// descriptors (registry.hpp). One mutex: BLAS setup calls are rare, and the
// compute calls only look a handle up.
#include "registry.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace unipool::nullgpu::blas {

namespace {

struct LtObject {
  LtKind kind;
  std::map<int, std::vector<unsigned char>> attributes;
};

struct Registry {
  std::mutex mutex;
  std::map<void*, HandleState> handles;
  std::map<const void*, LtObject> lt_objects;
};

// Never destroyed: torch destroys its handles from static destructors,
// which may run after this library's.
Registry& registry() {
  static Registry* const r = new Registry;
  return *r;
}

std::atomic<uint64_t> compute_calls{0};

// cuBLAS's statuses (the header cannot be included: see cublas_compute.cpp).
constexpr int kSuccess = 0;
constexpr int kNotInitialized = 1;
constexpr int kAllocFailed = 3;
constexpr int kInvalidValue = 7;

// The object if it is live and of `kind`, else null. Caller holds the lock.
LtObject* find_lt(Registry& r, LtKind kind, const void* object) {
  const auto it = r.lt_objects.find(object);
  return it == r.lt_objects.end() || it->second.kind != kind ? nullptr : &it->second;
}

}  // namespace

extern "C" {

void* unipool_nullgpu_blas_create_handle() noexcept {
  // The handle's address is all torch sees; one byte of storage makes it unique.
  void* handle = new (std::nothrow) unsigned char[1];
  if (handle == nullptr) return nullptr;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  try {
    r.handles.emplace(handle, HandleState{});
  } catch (...) {
    delete[] static_cast<unsigned char*>(handle);
    return nullptr;
  }
  return handle;
}

bool unipool_nullgpu_blas_destroy_handle(void* handle) noexcept {
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    if (r.handles.erase(handle) == 0) return false;
  }
  delete[] static_cast<unsigned char*>(handle);
  return true;
}

bool unipool_nullgpu_blas_with_handle(void* handle, void (*update)(HandleState&, void*), void* arg) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.handles.find(handle);
  if (it == r.handles.end()) return false;
  update(it->second, arg);
  return true;
}

bool unipool_nullgpu_blas_handle_live(void* handle) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.handles.count(handle) != 0;
}

void* unipool_nullgpu_blas_create_lt(LtKind kind) noexcept {
  // Callers may treat the object as the header's opaque struct (at most
  // 32 words): give it that much storage, zeroed.
  void* object = new (std::nothrow) uint64_t[32]();
  if (object == nullptr) return nullptr;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  try {
    r.lt_objects.emplace(object, LtObject{kind, {}});
  } catch (...) {
    delete[] static_cast<uint64_t*>(object);
    return nullptr;
  }
  return object;
}

bool unipool_nullgpu_blas_destroy_lt(LtKind kind, void* object) noexcept {
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    if (find_lt(r, kind, object) == nullptr) return false;
    r.lt_objects.erase(object);
  }
  delete[] static_cast<uint64_t*>(object);
  return true;
}

bool unipool_nullgpu_blas_lt_live(LtKind kind, const void* object) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return find_lt(r, kind, object) != nullptr;
}

bool unipool_nullgpu_blas_lt_set(LtKind kind, void* object, int attribute, const void* data, size_t bytes) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  LtObject* o = find_lt(r, kind, object);
  if (o == nullptr) return false;
  try {
    const auto* first = static_cast<const unsigned char*>(data);
    o->attributes[attribute].assign(first, first + bytes);
  } catch (...) {
    return false;
  }
  return true;
}

bool unipool_nullgpu_blas_lt_get(LtKind kind, const void* object, int attribute, void* data, size_t bytes,
                                 size_t* written) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const LtObject* o = find_lt(r, kind, object);
  if (o == nullptr) return false;
  const auto it = o->attributes.find(attribute);
  const size_t stored = it == o->attributes.end() ? bytes : it->second.size();
  if (written != nullptr) *written = stored;
  if (bytes == 0 || data == nullptr) return true;
  std::memset(data, 0, bytes);
  if (it != o->attributes.end()) std::memcpy(data, it->second.data(), std::min(bytes, stored));
  return true;
}

int unipool_nullgpu_blas_create_status(void** out) noexcept {
  if (out == nullptr) return kInvalidValue;
  *out = unipool_nullgpu_blas_create_handle();
  return *out == nullptr ? kAllocFailed : kSuccess;
}

int unipool_nullgpu_blas_destroy_status(void* handle) noexcept {
  return unipool_nullgpu_blas_destroy_handle(handle) ? kSuccess : kNotInitialized;
}

int unipool_nullgpu_blas_lt_set_status(LtKind kind, void* object, int attribute, const void* data,
                                       size_t bytes) noexcept {
  if (data == nullptr && bytes != 0) return kInvalidValue;
  return unipool_nullgpu_blas_lt_set(kind, object, attribute, data, bytes) ? kSuccess : kInvalidValue;
}

int unipool_nullgpu_blas_lt_get_status(LtKind kind, const void* object, int attribute, void* data, size_t bytes,
                                       size_t* written) noexcept {
  return unipool_nullgpu_blas_lt_get(kind, object, attribute, data, bytes, written) ? kSuccess : kInvalidValue;
}

void unipool_nullgpu_blas_count_compute() noexcept { compute_calls.fetch_add(1, std::memory_order_relaxed); }

uint64_t unipool_nullgpu_blas_compute_calls() noexcept { return compute_calls.load(std::memory_order_relaxed); }

}  // extern "C"

}  // namespace unipool::nullgpu::blas
