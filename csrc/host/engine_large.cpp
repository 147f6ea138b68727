// unipool host: large blocks, exact sizes from the arenas' range allocators,
// each behind a 64-byte header that names its range.
#include "backend/host_pinner.hpp"
#include "host/engine.hpp"
#include "host/pinner_factory.hpp"

namespace unipool::host {
namespace {
std::atomic<PinnerFactory> g_pinner_factory{nullptr};
}  // namespace

void set_pinner_factory(PinnerFactory factory) noexcept { g_pinner_factory.store(factory); }

std::unique_ptr<backend::HostPinner> make_pinner() {
  const PinnerFactory factory = g_pinner_factory.load();
  return factory ? factory() : backend::make_default_host_pinner();
}

uint64_t Engine::headroom() const noexcept {
  if (config_.limit == 0) return ~uint64_t{0};
  const uint64_t committed = committed_.get();
  return committed >= config_.limit ? 0 : config_.limit - committed;
}

void Engine::apply(const ArenaDelta& delta) noexcept {
  if (delta.committed != 0) committed_.add(delta.committed);
  if (delta.pinned != 0) pinned_.add(delta.pinned);
  if (delta.registrations) registrations_.fetch_add(delta.registrations, std::memory_order_relaxed);
  if (delta.pin_failures) pin_failures_.fetch_add(delta.pin_failures, std::memory_order_relaxed);
  if (delta.pageable_fallback) pageable_bytes_.fetch_add(delta.pageable_fallback, std::memory_order_relaxed);
  if (delta.hugetlb_fallbacks) hugetlb_fallbacks_.fetch_add(delta.hugetlb_fallbacks, std::memory_order_relaxed);
}

void Engine::ensure_pinner() noexcept {
  if (pinner_checked_) return;
  pinner_checked_ = true;
  if (config_.pinned == HostPinned::off) return;
  // The CUDA runtime allocates as it starts: those requests are served on
  // the side (t_internal), never from this pool's locked paths.
  InternalScope internal;
  try {
    pinner_ = make_pinner();
    pin_available_ = pinner_ != nullptr && pinner_->available();
  } catch (...) {
    pin_available_ = false;
  }
  if (pin_available_) arena_settings_.pinner = pinner_.get();
}

Status Engine::arena_allocate(uint64_t size, uint64_t alignment, RangeAllocation* r, uint32_t* index,
                              Message* why) noexcept {
  ensure_pinner();
  for (int round = 0; round < 2; ++round) {
    const uint32_t count = arena_count_.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < count; ++i) {
      Message attempt;
      ArenaDelta delta;
      bool full = false;
      const Status s = arenas_[i].allocate(size, alignment, headroom(), arena_settings_, r, &delta, &attempt, &full);
      apply(delta);
      if (s == Status::ok) {
        *index = i;
        return Status::ok;
      }
      if (!full) {
        *why = attempt;
        return s;
      }
    }
    if (count == kMaxArenas) {
      why->add("every arena's reserved address space is full");
      return Status::out_of_space;
    }
    if (size + alignment > arena_settings_.reserve) {
      why->add("larger than an arena (reserve=").add_dec(arena_settings_.reserve).add(")");
      return Status::too_large;
    }
    if (!arenas_[count].init(arena_settings_)) {
      why->add("cannot reserve ").add_dec(arena_settings_.reserve).add(" bytes of address space");
      return Status::out_of_space;
    }
    if (count == 0) {
      arena0_slots_.store(arenas_[0].slots(), std::memory_order_relaxed);
      arena0_base_.store(reinterpret_cast<uintptr_t>(arenas_[0].base()), std::memory_order_release);
      LockGuard deferred(deferred_lock_);
      arena0_reserved_ = arenas_[0].reserved();
      refresh_fast_span();
    }
    arena_count_.store(count + 1, std::memory_order_release);
  }
  why->add("no arena could hold the request");
  return Status::out_of_space;
}

void* Engine::allocate_large(size_t size, size_t alignment) noexcept {
  const uint64_t pad = alignment > kLargeHeader ? alignment : kLargeHeader;
  RangeAllocation r;
  uint32_t index = 0;
  LockGuard lock(large_lock_);
  Message why;
  const Status s = arena_allocate(size + pad, alignment > kLargeHeader ? alignment : 0, &r, &index, &why);
  if (s != Status::ok) {
    fail(s, Message{}.add("unipool host pool: cannot allocate ").add_dec(size).add(" bytes: ").add(why.c_str()));
    return nullptr;
  }
  Arena& arena = arenas_[index];
  const uint64_t extent = arena.ranges().allocation_size(r.offset, r.handle);
  char* user = arena.base() + r.offset + pad;
  auto* h = reinterpret_cast<LargeHeader*>(user - kLargeHeader);
  h->magic = kLargeLive ^ reinterpret_cast<uintptr_t>(user) ^ secret_;
  h->handle = r.handle;
  h->offset = r.offset;
  h->extent = extent;
  h->requested = size;
  h->arena = index;
  h->pad = static_cast<uint32_t>(pad);
  h->pinned = arena.range_pinned(r.offset, extent) ? 1 : 0;
  large_count_.fetch_add(1, std::memory_order_relaxed);
  requested_.add(static_cast<int64_t>(size));
  allocated_.add(static_cast<int64_t>(extent));
  return user;
}

LargeHeader* Engine::large_header(Arena* arena, const void* p) const noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto base = reinterpret_cast<uintptr_t>(arena->base());
  // The header must lie in the committed prefix, where reading is safe.
  if (a % kLargeHeader != 0 || a - base < kLargeHeader || a - base > arena->committed_end()) return nullptr;
  auto* h = reinterpret_cast<LargeHeader*>(a - kLargeHeader);
  if (h->magic != (kLargeLive ^ a ^ secret_)) return nullptr;
  // A header is only believed when the range allocator agrees: a live range
  // with that handle, at that offset, of that extent, `pad` below p.
  if (h->offset + h->pad != a - base) return nullptr;
  if (arena->ranges().allocation_size(h->offset, h->handle) != h->extent) return nullptr;
  return h;
}

Status Engine::free_large(Arena* arena, void* p) noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  LockGuard lock(large_lock_);
  LargeHeader* h = large_header(arena, p);
  if (h == nullptr) {
    const auto base = reinterpret_cast<uintptr_t>(arena->base());
    if (a % kLargeHeader == 0 && a - base >= kLargeHeader && a - base <= arena->committed_end() &&
        reinterpret_cast<LargeHeader*>(a - kLargeHeader)->magic == (kLargeFreed ^ a ^ secret_)) {
      return misuse("double free (the large block is already free)", p);
    }
    return misuse("free of a pointer that is not a live block of this pool (foreign or interior)", p);
  }
  const uint64_t extent = h->extent;
  const uint64_t requested = h->requested;
  h->magic = kLargeFreed ^ a ^ secret_;
  arena->free(h->offset, h->handle);
  ArenaDelta delta;
  arena->maybe_trim(retain_, &delta);
  apply(delta);
  large_count_.fetch_sub(1, std::memory_order_relaxed);
  requested_.add(-static_cast<int64_t>(requested));
  allocated_.add(-static_cast<int64_t>(extent));
  return Status::ok;
}

}  // namespace unipool::host
