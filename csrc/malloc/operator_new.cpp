// unipool malloc face: every replaceable operator new and delete.
//
// libstdc++'s own operators would reach the pool through malloc anyway; these
// go straight to it, and free the sized and aligned forms without a detour.
// Throwing forms follow [new.delete]: on failure call the new-handler and
// retry, throw std::bad_alloc when there is none.
#include <new>

#include "malloc/face_alloc.hpp"

namespace mf = unipool::malloc_face;

namespace {

void* allocate_or_throw(size_t size, size_t alignment) {
  for (;;) {
    void* block = mf::allocate_aligned(alignment, size);
    if (block != nullptr) return block;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* allocate_or_null(size_t size, size_t alignment) noexcept {
  try {
    return allocate_or_throw(size, alignment);
  } catch (...) {
    return nullptr;
  }
}

constexpr size_t kNatural = mf::kNaturalAlignment;
size_t align_of(std::align_val_t a) { return static_cast<size_t>(a); }

}  // namespace

void* operator new(size_t size) { return allocate_or_throw(size, kNatural); }
void* operator new[](size_t size) { return allocate_or_throw(size, kNatural); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return allocate_or_null(size, kNatural); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return allocate_or_null(size, kNatural); }
void* operator new(size_t size, std::align_val_t a) { return allocate_or_throw(size, align_of(a)); }
void* operator new[](size_t size, std::align_val_t a) { return allocate_or_throw(size, align_of(a)); }
void* operator new(size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_or_null(size, align_of(a));
}
void* operator new[](size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_or_null(size, align_of(a));
}

void operator delete(void* p) noexcept { mf::release(p, "operator delete"); }
void operator delete[](void* p) noexcept { mf::release(p, "operator delete[]"); }
void operator delete(void* p, size_t) noexcept { mf::release(p, "operator delete"); }
void operator delete[](void* p, size_t) noexcept { mf::release(p, "operator delete[]"); }
void operator delete(void* p, const std::nothrow_t&) noexcept { mf::release(p, "operator delete"); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { mf::release(p, "operator delete[]"); }
void operator delete(void* p, std::align_val_t) noexcept { mf::release(p, "operator delete"); }
void operator delete[](void* p, std::align_val_t) noexcept { mf::release(p, "operator delete[]"); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { mf::release(p, "operator delete"); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { mf::release(p, "operator delete[]"); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { mf::release(p, "operator delete"); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  mf::release(p, "operator delete[]");
}
