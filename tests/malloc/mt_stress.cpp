// tests/malloc: a multi-threaded stress of every allocation function.
//
//   mt_stress [threads] [waves] [ops]
//
// Waves of threads allocate with malloc, calloc, realloc, aligned_alloc,
// posix_memalign, memalign and new[], write a pattern derived from the
// block's id, hand blocks to other threads (which verify, grow and free
// them), and exit while blocks they made are still live elsewhere. Every
// block is verified when freed. The printed checksum sums a hash of every
// block ever made, whichever thread freed it, so it does not depend on
// scheduling: a run under LD_PRELOAD must print the same line as without.
#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "check.hpp"

namespace {

enum class Kind : uint8_t { malloc_free, new_array, new_aligned };

struct Block {
  unsigned char* p;
  uint64_t size;     // current size
  uint64_t id;
  uint64_t made;     // size when made (what the checksum hashes)
  size_t alignment;  // for new_aligned
  Kind kind;
};

uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

unsigned char pattern(uint64_t id, uint64_t i) { return static_cast<unsigned char>(mix(id) + i * 131); }

// Every byte of the first 4 KiB, then every 61st byte, and the last one:
// catches overlap and stale reuse without making large blocks dominate.
template <class F>
void for_grid_bytes(uint64_t size, F f) {
  for (uint64_t i = 0; i < size; i += (i < 4096 ? 1 : 61)) f(i);
}

// Writes the grid bytes from `from` on, and the last byte.
void fill(const Block& b, uint64_t from = 0) {
  for_grid_bytes(b.size, [&](uint64_t i) {
    if (i >= from) b.p[i] = pattern(b.id, i);
  });
  if (b.size > 0) b.p[b.size - 1] = pattern(b.id, b.size - 1);
}

// Checks the grid bytes below `upto`, and the last byte when upto == size.
void verify(const Block& b, uint64_t upto) {
  auto check = [&](uint64_t i) {
    if (b.p[i] != pattern(b.id, i)) {
      std::fprintf(stderr, "block %llu (%llu bytes) corrupt at byte %llu\n", (unsigned long long)b.id,
                   (unsigned long long)b.size, (unsigned long long)i);
      std::exit(1);
    }
  };
  for_grid_bytes(upto, check);
  if (upto == b.size && upto > 0) check(upto - 1);
}

std::atomic<uint64_t> g_checksum{0};
std::atomic<uint64_t> g_blocks{0};

void release(Block& b) {
  verify(b, b.size);
  MALLOC_CHECK(malloc_usable_size(b.p) >= b.size);
  g_checksum.fetch_add(mix(b.id * 0x100000001B3ull + b.made), std::memory_order_relaxed);
  g_blocks.fetch_add(1, std::memory_order_relaxed);
  switch (b.kind) {
    case Kind::malloc_free: free(b.p); break;
    case Kind::new_array: delete[] b.p; break;
    case Kind::new_aligned: ::operator delete(b.p, std::align_val_t(b.alignment)); break;
  }
}

// Grows or shrinks a malloc'd block with realloc, keeping the common prefix.
void resize(Block& b, uint64_t size) {
  if (size == 0) size = 1;  // realloc(p, 0) frees: not a resize
  auto* q = static_cast<unsigned char*>(realloc(b.p, size));
  MALLOC_CHECK(q != nullptr);
  const uint64_t kept = std::min(size, b.size);
  b.p = q;
  verify(b, kept);  // the grid of the common prefix survived the move
  b.size = size;
  fill(b, kept);
}

class Mailboxes {
 public:
  explicit Mailboxes(size_t n) : boxes_(n) {}
  void send(size_t to, const Block& b) {
    std::lock_guard lock(boxes_[to].mutex);
    boxes_[to].blocks.push_back(b);
  }
  std::vector<Block> take(size_t from) {
    std::lock_guard lock(boxes_[from].mutex);
    std::vector<Block> out(boxes_[from].blocks.begin(), boxes_[from].blocks.end());
    boxes_[from].blocks.clear();
    return out;
  }

 private:
  struct Box {
    std::mutex mutex;
    std::deque<Block> blocks;
  };
  std::vector<Box> boxes_;
};

struct Rng {
  uint64_t s;
  uint64_t next() { return s = mix(s); }
  uint64_t below(uint64_t n) { return next() % n; }
};

uint64_t draw_size(Rng& r) {
  const uint64_t c = r.below(1000);
  if (c < 700) return r.below(1024);                  // small, 0 included
  if (c < 950) return 1024 + r.below(63 * 1024);      // middle
  if (c < 999) return 64 * 1024 + r.below(4 << 20);   // large
  return (33u << 20) + r.below(8u << 20);              // huge
}

Block make(Rng& r, uint64_t id) {
  Block b{nullptr, draw_size(r), id, 0, 0, Kind::malloc_free};
  b.made = b.size;
  const size_t alignment = size_t{32} << r.below(12);  // 32 B .. 64 KiB
  switch (r.below(7)) {
    case 0: b.p = static_cast<unsigned char*>(malloc(b.size)); break;
    case 1: {
      b.p = static_cast<unsigned char*>(calloc(1, b.size));
      MALLOC_CHECK(b.p != nullptr);
      for (uint64_t i = 0; i < std::min<uint64_t>(b.size, 65536); ++i) MALLOC_CHECK(b.p[i] == 0);
      break;
    }
    case 2: b.p = static_cast<unsigned char*>(aligned_alloc(alignment, (b.size + alignment - 1) / alignment * alignment)); break;
    case 3: {
      void* p = nullptr;
      MALLOC_CHECK(posix_memalign(&p, alignment, b.size) == 0);
      b.p = static_cast<unsigned char*>(p);
      break;
    }
    case 4: b.p = static_cast<unsigned char*>(memalign(alignment, b.size)); break;
    case 5: b.p = new unsigned char[b.size]; b.kind = Kind::new_array; break;
    default:
      b.p = static_cast<unsigned char*>(::operator new(b.size, std::align_val_t(alignment)));
      b.alignment = alignment;
      b.kind = Kind::new_aligned;
      break;
  }
  MALLOC_CHECK(b.p != nullptr);
  if (b.kind != Kind::malloc_free || r.below(7) >= 2) {
    MALLOC_CHECK(reinterpret_cast<uintptr_t>(b.p) % 16 == 0);
  }
  if (b.kind == Kind::new_aligned) MALLOC_CHECK(reinterpret_cast<uintptr_t>(b.p) % alignment == 0);
  fill(b);
  return b;
}

void worker(Mailboxes& mail, size_t self, size_t threads, uint64_t seed, uint64_t ops) {
  Rng r{seed};
  std::vector<Block> mine;
  for (uint64_t op = 0; op < ops; ++op) {
    const uint64_t c = r.below(100);
    if (c < 40 || mine.empty()) {
      mine.push_back(make(r, seed * 1'000'000'007ull + op));
    } else if (c < 70) {
      const size_t i = r.below(mine.size());
      release(mine[i]);
      mine[i] = mine.back();
      mine.pop_back();
    } else if (c < 85) {
      const size_t i = r.below(mine.size());
      if (mine[i].kind == Kind::malloc_free) resize(mine[i], draw_size(r));
    } else {
      const size_t i = r.below(mine.size());
      mail.send(r.below(threads), mine[i]);
      mine[i] = mine.back();
      mine.pop_back();
    }
    if (op % 64 == 0) {
      // What others sent: verify, grow a malloc'd one (a realloc by a thread
      // that did not make it), free.
      for (Block& b : mail.take(self)) {
        if (b.kind == Kind::malloc_free && b.id % 3 == 0) resize(b, b.size + 100 + b.id % 5000);
        release(b);
      }
    }
  }
  // Half of what is left is freed here; the rest goes to the next wave.
  for (size_t i = 0; i < mine.size(); ++i) {
    if (i % 2 == 0) release(mine[i]);
    else mail.send((self + 1) % threads, mine[i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t threads = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 8;
  const size_t waves = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4;
  const uint64_t ops = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 20000;
  Mailboxes mail(threads);
  for (size_t w = 0; w < waves; ++w) {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) {
      pool.emplace_back(worker, std::ref(mail), t, threads, 1 + w * threads + t, ops);
    }
    for (auto& th : pool) th.join();
  }
  for (size_t t = 0; t < threads; ++t) {
    for (Block& b : mail.take(t)) release(b);
  }
  std::printf("blocks=%llu checksum=%016llx\n", (unsigned long long)g_blocks.load(),
              (unsigned long long)g_checksum.load());
  return 0;
}
