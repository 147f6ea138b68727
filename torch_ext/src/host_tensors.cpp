// unipool torch extension: the host pool, and torch CPU tensors whose memory
// comes from it (unipool.empty); the block goes back to the pool when the
// last tensor or view of the storage dies.
#include <ATen/ATen.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "unipool_torch.hpp"

namespace unipool::torch_ext {
namespace {

std::mutex g_host_mutex;  // serializes choosing the pool, not using it
// Never destroyed: tensors may outlive the module. Atomic, so every pinned
// allocation and free (and every host tensor) reads it without taking the
// mutex, which threads allocating at once would contend on.
std::atomic<HostPool*> g_host_pool{nullptr};

void free_host_block(void* p) {
  if (p) host_pool().deallocate(p);
}

at::Tensor host_empty(std::vector<int64_t> shape, py::object dtype_obj) {
  TORCH_CHECK_TYPE(THPDtype_Check(dtype_obj.ptr()), "unipool.empty: dtype must be a torch.dtype");
  const at::ScalarType dtype = reinterpret_cast<THPDtype*>(dtype_obj.ptr())->scalar_type;
  // Products that wrap would hand out a small block under a large shape:
  // refused as OverflowError (pybind's translation of std::overflow_error).
  int64_t numel = 1;
  for (int64_t d : shape) {
    TORCH_CHECK_VALUE(d >= 0, "unipool.empty: negative dimension ", d);
    if (__builtin_mul_overflow(numel, d, &numel)) throw std::overflow_error("unipool.empty: size overflows int64");
  }
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel), c10::elementSize(dtype), &bytes)) {
    throw std::overflow_error("unipool.empty: size times the dtype's size overflows 64 bits");
  }
  void* p = host_pool().allocate(bytes == 0 ? 1 : bytes, 64);
  TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr, "unipool.empty: the host pool cannot allocate ", bytes,
                   " bytes: ", HostPool::last_error());
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                       c10::DataPtr(p, p, &free_host_block, c10::Device(c10::kCPU)), nullptr, false);
  return at::empty({0}, at::TensorOptions().dtype(dtype)).set_(storage, 0, shape);
}

py::dict host_stats() {
  const HostPoolStats s = host_pool().stats();
  py::dict d;
#define UNIPOOL_FIELD(f) d[#f] = s.f
  UNIPOOL_FIELD(requested_bytes); UNIPOOL_FIELD(peak_requested_bytes);
  UNIPOOL_FIELD(allocated_bytes); UNIPOOL_FIELD(peak_allocated_bytes);
  UNIPOOL_FIELD(committed_bytes); UNIPOOL_FIELD(peak_committed_bytes);
  UNIPOOL_FIELD(pinned_bytes); UNIPOOL_FIELD(cached_bytes); UNIPOOL_FIELD(deferred_bytes);
  UNIPOOL_FIELD(deferred_blocks); UNIPOOL_FIELD(arena_free_bytes); UNIPOOL_FIELD(overhead_bytes);
  UNIPOOL_FIELD(reserved_bytes); UNIPOOL_FIELD(small_blocks); UNIPOOL_FIELD(middle_blocks);
  UNIPOOL_FIELD(large_blocks); UNIPOOL_FIELD(huge_blocks); UNIPOOL_FIELD(pin_registrations);
  UNIPOOL_FIELD(pin_failures); UNIPOOL_FIELD(pageable_bytes); UNIPOOL_FIELD(misuse_errors);
#undef UNIPOOL_FIELD
  d["pinning_state"] = to_string(host_pool().pinning_state());
  return d;
}

void host_validate() {
  std::string why;
  TORCH_CHECK(host_pool().validate(&why), "unipool host pool: invariant broken: ", why);
}

}  // namespace

HostPool& host_pool() {
  if (HostPool* pool = g_host_pool.load(std::memory_order_acquire)) return *pool;
  std::lock_guard lock(g_host_mutex);
  if (g_host_pool.load(std::memory_order_relaxed) == nullptr) {
    g_host_pool.store(&HostPool::default_pool(), std::memory_order_release);
  }
  return *g_host_pool.load(std::memory_order_relaxed);
}

namespace {

HostPoolConfig parse_host_conf(const std::string& conf) {
  try {
    return HostPoolConfig::parse(conf);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "unipool: bad host_conf: ", e.what());
  }
}

// Throws unless the pool is still to be made or already has `config`.
void check_against_pool_in_use(const HostPoolConfig& config) {
  if (HostPool* pool = g_host_pool.load(std::memory_order_relaxed)) {
    TORCH_CHECK(pool->config().to_string() == config.to_string(), "unipool: the host pool is already in use with '",
                pool->config().to_string(),
                "'; configure it (install(host_conf=...)) before the first host tensor or pinned allocation");
  }
}

}  // namespace

void check_host_pool_config(const std::string& conf) {
  const HostPoolConfig config = parse_host_conf(conf);
  std::lock_guard lock(g_host_mutex);
  check_against_pool_in_use(config);
}

void configure_host_pool(const std::string& conf) {
  const HostPoolConfig config = parse_host_conf(conf);
  std::lock_guard lock(g_host_mutex);
  check_against_pool_in_use(config);
  if (g_host_pool.load(std::memory_order_relaxed) == nullptr) {
    g_host_pool.store(new HostPool(config), std::memory_order_release);
  }
}

void bind_host_tensors(py::module_& m) {
  m.def("empty", &host_empty, py::arg("shape"), py::arg("dtype"));
  m.def("host_stats", &host_stats);
  m.def("host_validate", &host_validate);
  m.def("host_trim", [] { host_pool().trim(); });
  m.def("host_reset_peak_stats", [] { host_pool().reset_peak_stats(); });
  m.def("_host_record_history", [](size_t max_entries) {
    if (!host_pool().record_history(max_entries)) {  // out of memory, as docs/api.md's Python model says
      PyErr_Format(PyExc_MemoryError, "unipool: cannot map a host history ring of %zu entries", max_entries);
      throw py::error_already_set();
    }
  });
  m.def("_host_history_json", [] { return host_pool().history_json(); });
}

void bind_host_tensors_testing(py::module_& t) {
  t.def("configure_host", &configure_host_pool, py::arg("conf"));
  t.def("host_owns", [](uint64_t ptr) { return host_pool().owns(reinterpret_cast<void*>(ptr)); });
}

}  // namespace unipool::torch_ext
