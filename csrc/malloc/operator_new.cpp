// unipool malloc face: the replaceable operator new and delete.
//
// libstdc++'s own operators would reach the pool through malloc anyway; these
// go straight to it, and free the sized and aligned forms without a detour.
// Throwing forms follow [new.delete]: on failure call the new-handler and
// retry, throw std::bad_alloc when there is none; both come from the
// program's C++ runtime (cxx_runtime.hpp says why). The nothrow forms are
// the runtime's: they call these inside a try block.
#include <new>

#include "core/align.hpp"
#include "malloc/cxx_runtime.hpp"
#include "malloc/face_alloc.hpp"

namespace mf = unipool::malloc_face;

namespace {

// No object with a destructor here: a frame the program's exception unwinds
// through has no landing pad of the face's runtime.
void* allocate_or_throw(size_t size, size_t alignment) {
  for (;;) {
    void* block = mf::allocate_aligned(alignment, size);
    if (block != nullptr) return block;
    // The engine's own containers (inside InternalScope, or while the pool
    // is built) catch the face's runtime's exception, and must not run the
    // program's handler with the engine's locks held.
    if (mf::inside_engine()) throw std::bad_alloc();
    std::new_handler handler = mf::program_new_handler();
    if (handler == nullptr) mf::throw_program_bad_alloc();
    handler();
  }
}

constexpr size_t kNatural = mf::kNaturalAlignment;
// align_val_t's value, which nothing checked before: one that is not a power
// of two throws at once, as in libstdc++ (no new-handler can make it
// acceptable).
size_t align_of(std::align_val_t a) {
  const auto alignment = static_cast<size_t>(a);
  if (!unipool::is_power_of_two(alignment)) mf::throw_program_bad_alloc();
  return alignment;
}

}  // namespace

void* operator new(size_t size) { return allocate_or_throw(size, kNatural); }
void* operator new[](size_t size) { return allocate_or_throw(size, kNatural); }
void* operator new(size_t size, std::align_val_t a) { return allocate_or_throw(size, align_of(a)); }
void* operator new[](size_t size, std::align_val_t a) { return allocate_or_throw(size, align_of(a)); }

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
