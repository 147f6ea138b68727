// unipool kv shared: creating, attaching and detaching.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "backend/os/os_memory.hpp"
#include "backend/os/unix_socket.hpp"
#include "core/align.hpp"
#include "kv/kv_memory.hpp"
#include "kv/kv_state.hpp"
#include "kv/shared/shared_members.hpp"
#include "kv/shared/shared_server.hpp"
#include "kv/shared/shared_state.hpp"

namespace unipool {
namespace {

using kv_shared::Header;

[[noreturn]] void fail(const std::string& what, int error = 0) {
  throw std::runtime_error("SharedKVBlockPool: " + what + (error ? std::string(": ") + std::strerror(error) : ""));
}

// The pool refuses the caller (SharedKVRefused), as opposed to fail().
[[noreturn]] void refuse(const std::string& what) { throw SharedKVRefused("SharedKVBlockPool: " + what); }

std::string check_name(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 64;
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok) {
    throw std::invalid_argument("SharedKVBlockPool: the name '" + std::string(name) +
                                "' must be 1 to 64 characters of A-Z a-z 0-9 . _ -");
  }
  return std::string(name);
}

void init_robust_mutex(pthread_mutex_t* m) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  const int rc = pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
  if (rc != 0) fail("pthread_mutex_init", rc);
}

// Points the view at the mapping's parts, as the header places them.
void view_mapping(SharedKVBlockPool::Local& l) noexcept {
  Header& h = *l.header;
  l.owners = reinterpret_cast<uint32_t*>(l.map + h.owners_offset);
  l.journal_ids = reinterpret_cast<uint32_t*>(l.map + h.journal_ids_offset);
  l.journal_previous = reinterpret_cast<uint32_t*>(l.map + h.journal_previous_offset);
  l.index.free.view(reinterpret_cast<uint64_t*>(l.map + h.free_offset), h.num_blocks);
  l.index.live.words = reinterpret_cast<uint64_t*>(l.map + h.live_offset);
}

void map_fd(SharedKVBlockPool::Local& l, uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, l.fd, 0);
  if (p == MAP_FAILED) fail("mmap of " + std::to_string(bytes) + " bytes", errno);
  l.map = static_cast<char*>(p);
  l.map_bytes = bytes;
  l.header = reinterpret_cast<Header*>(l.map);
}

// A memfd of `bytes`, sealed at that size (no member can shrink it under
// the others), its pages allocated now, on `numa_node` if asked.
void make_memory(SharedKVBlockPool::Local& l, const std::string& name, uint64_t bytes, int numa_node) {
  l.fd = memfd_create(("unipool.kv." + name).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (l.fd < 0) fail("memfd_create", errno);
  if (ftruncate(l.fd, static_cast<off_t>(bytes)) != 0) fail("ftruncate to " + std::to_string(bytes) + " bytes", errno);
  if (fcntl(l.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) fail("sealing the memfd", errno);
  map_fd(l, bytes);
  if (numa_node >= 0) {
    if (const int e = backend::os::bind_to_node(l.map, bytes, numa_node))
      fail("binding to NUMA node " + std::to_string(numa_node), e);
  }
  // Allocated now (under the binding, which shmem keeps per file), so that a
  // machine without the memory refuses here, not with a SIGBUS at a copy.
  if (const int e = posix_fallocate(l.fd, 0, static_cast<off_t>(bytes)))
    fail("allocating " + std::to_string(bytes) + " bytes", e);
}

void init_header(SharedKVBlockPool::Local& l, const SharedKVBlockPoolOptions& o, uint64_t stride,
                 const kv_shared::Offsets& off) {
  Header& h = *l.header;
  h.version = kv_shared::kLayoutVersion;
  h.header_bytes = sizeof(Header);
  h.block_bytes = o.block_bytes;
  h.stride = stride;
  h.num_blocks = o.num_blocks;
  h.alignment = o.alignment;
  h.owners_offset = off.owners;
  h.journal_ids_offset = off.journal_ids;
  h.journal_previous_offset = off.journal_previous;
  h.free_offset = off.free;
  h.live_offset = off.live;
  h.data_offset = off.data;
  h.total_bytes = off.total;
  h.lifetime = static_cast<uint32_t>(o.lifetime);
  h.max_members = o.max_members;
  h.lock_holder = kv_shared::kMaxMembers;
  init_robust_mutex(&h.lock);
  init_robust_mutex(&h.serve_lock);
  view_mapping(l);
  l.index.free.init_in(reinterpret_cast<uint64_t*>(l.map + off.free), o.num_blocks, /*all_set=*/true);
  h.creator = static_cast<uint32_t>(kv_shared::join(h));  // slot 0 of an empty table
  h.magic = kv_shared::kMagic;
}

// The header is the creator's, from any build: every field is checked
// against what this build would lay out before one is used.
void check_header(const Header& h, uint64_t file_bytes, const std::string& name, const SharedKVAttachOptions& o) {
  const std::string pool = "the pool '" + name + "'";
  if (file_bytes < sizeof(Header) || h.magic != kv_shared::kMagic) refuse(pool + " is not a unipool shared KV pool");
  if (h.version != kv_shared::kLayoutVersion || h.header_bytes != sizeof(Header)) {
    refuse(pool + " has layout version " + std::to_string(h.version) + " (header of " + std::to_string(h.header_bytes) +
           " bytes); this library reads version " + std::to_string(kv_shared::kLayoutVersion) + " (" +
           std::to_string(sizeof(Header)) + " bytes): attach with the unipool build that created it");
  }
  const kv_shared::Offsets off =
      kv_shared::layout_offsets(h.num_blocks, h.stride, h.alignment, backend::os::page_size());
  if (h.num_blocks == 0 || h.num_blocks > (uint64_t{1} << 31) || h.stride < h.block_bytes ||
      off.total != h.total_bytes || off.total != file_bytes || off.owners != h.owners_offset ||
      off.data != h.data_offset || off.free != h.free_offset || off.live != h.live_offset || h.max_members == 0 ||
      h.max_members > kv_shared::kMaxMembers) {
    refuse(pool + "'s header is inconsistent with its size (" + std::to_string(file_bytes) + " bytes)");
  }
  if ((o.block_bytes && o.block_bytes != h.block_bytes) || (o.num_blocks && o.num_blocks != h.num_blocks)) {
    refuse(pool + " has " + std::to_string(h.num_blocks) + " blocks of " + std::to_string(h.block_bytes) +
           " bytes; the caller expects " + (o.num_blocks ? std::to_string(o.num_blocks) : "any number of") +
           " blocks of " + (o.block_bytes ? std::to_string(o.block_bytes) : "any size") + " bytes");
  }
}

}  // namespace

SharedKVBlockPool::SharedKVBlockPool() : local_(std::make_unique<Local>()) {}

SharedKVBlockPool::Local::~Local() {
  if (fork_generation != kv_shared::fork_generation()) {
    server.release();  // the parent's thread: not this process's to stop
  }
  server.reset();
  if (map) {
    // The header is only read when something was pinned: a failed attach
    // may have mapped a file too short to hold one.
    if (pinning.pinned_bytes() != 0) pinning.unpin(map + header->data_offset);
    munmap(map, map_bytes);
  }
  if (fd >= 0) close(fd);
}

std::unique_ptr<SharedKVBlockPool> SharedKVBlockPool::create(std::string_view name_view,
                                                             const SharedKVBlockPoolOptions& o) {
  const std::string name = check_name(name_view);
  const uint64_t stride = kv_check_layout(o.block_bytes, o.num_blocks, o.alignment, o.max_pin, "SharedKVBlockPool");
  if (o.max_members == 0 || o.max_members > kv_shared::kMaxMembers) {
    throw std::invalid_argument("SharedKVBlockPool: max_members must be in 1 .. 255 (got " +
                                std::to_string(o.max_members) + ")");
  }
  const kv_shared::Offsets off = kv_shared::layout_offsets(o.num_blocks, stride, o.alignment, backend::os::page_size());
  kv_check_fits_machine(off.total, "SharedKVBlockPool");
  kv_shared::watch_forks();
  const int listen_fd = kv_shared::listen_on(name);
  if (listen_fd < 0) {
    if (errno == EADDRINUSE)
      refuse("a shared KV pool named '" + name +
             "' exists (a live process serves it); attach to it or pick another name");
    fail("listening on the pool's socket", errno);
  }
  std::unique_ptr<SharedKVBlockPool> pool(new SharedKVBlockPool());
  Local& l = *pool->local_;
  l.fork_generation = kv_shared::fork_generation();
  try {
    make_memory(l, name, off.total, o.numa_node);
    init_header(l, o, stride, off);
  } catch (...) {
    backend::os::close_listening(listen_fd);
    throw;
  }
  l.member = l.header->creator;
  try {
    l.server = std::make_unique<kv_shared::Server>(*l.header, l.fd, name, listen_fd);
  } catch (...) {
    backend::os::close_listening(listen_fd);
    throw;
  }
  pool->finish_open(name, o.pinned, o.max_pin);
  return pool;
}

std::unique_ptr<SharedKVBlockPool> SharedKVBlockPool::attach(std::string_view name_view,
                                                             const SharedKVAttachOptions& o) {
  const std::string name = check_name(name_view);
  if (o.max_pin < (uint64_t{2} << 20)) throw std::invalid_argument("SharedKVBlockPool: max_pin must be >= 2 MiB");
  kv_shared::watch_forks();
  std::unique_ptr<SharedKVBlockPool> pool(new SharedKVBlockPool());
  Local& l = *pool->local_;
  l.fork_generation = kv_shared::fork_generation();
  std::string why;
  l.fd = kv_shared::receive_pool_fd(name, &why);
  if (l.fd < 0) refuse("cannot attach to '" + name + "': " + why);
  struct stat st {};
  if (fstat(l.fd, &st) != 0) fail("fstat of the pool's memfd", errno);
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  map_fd(l, bytes < sizeof(Header) ? sizeof(Header) : bytes);
  check_header(*l.header, bytes, name, o);
  view_mapping(l);
  {
    kv_shared::Lock lock(l);
    kv_shared::reclaim_dead_members(l);
    if (l.header->closed.load(std::memory_order_acquire))
      refuse("the pool '" + name + "' is closed (its creator exited)");
    const int m = kv_shared::join(*l.header);
    if (m < 0)
      refuse("the pool '" + name + "' has " + std::to_string(l.header->max_members) + " members already (max_members)");
    l.member = static_cast<uint32_t>(m);
  }
  if (l.header->lifetime == static_cast<uint32_t>(SharedKVLifetime::while_attached)) {
    l.server = std::make_unique<kv_shared::Server>(*l.header, l.fd, name, -1);
  }
  pool->finish_open(name, o.pinned, o.max_pin);
  return pool;
}

// The caller is a member; pins its mapping of the blocks.
void SharedKVBlockPool::finish_open(const std::string& name, HostPinned pinned, uint64_t max_pin) {
  Local& l = *local_;
  const Header& h = *l.header;
  name_ = name;
  base_ = l.map + h.data_offset;
  block_bytes_ = h.block_bytes;
  stride_ = h.stride;
  num_blocks_ = h.num_blocks;
  l.pinning.pin(static_cast<char*>(base_), round_up(stride_ * num_blocks_, backend::os::page_size()), pinned, max_pin,
                "SharedKVBlockPool");
  pinning_state_ = l.pinning.state();
}

SharedKVBlockPool::~SharedKVBlockPool() {
  Local& l = *local_;
  // Not joined (a failed attach), or a forked child's copy: ~Local unmaps.
  if (l.fork_generation != kv_shared::fork_generation() || !l.header || l.member >= l.header->max_members) return;
  const bool creator_closes =
      l.member == l.header->creator && l.header->lifetime == static_cast<uint32_t>(SharedKVLifetime::creator);
  if (creator_closes) l.header->closed.store(1, std::memory_order_release);
  l.server.reset();  // another member takes over serving
  kv_shared::Lock lock(l);
  for (const Local::Batch& b : l.batches) kv_release_fence(*b.source, b.fence);
  kv_shared::reclaim_member(l, l.member, /*died=*/false);
}

}  // namespace unipool
