// unipool torch extension: the _KVCore CPython type (see kv_pool_type.hpp).
#include "kv_pool_type.hpp"

#include <torch/csrc/autograd/python_variable.h>

#include <new>
#include <string>
#include <vector>

namespace unipool::torch_ext {
namespace {

struct KVCore {
  PyObject_HEAD std::shared_ptr<KVPool>* pool;  // heap-held so the struct stays plain C
  KVPool* raw;                                  // pool->get(), one load on the hot path
};

PyObject* g_exhausted = nullptr;
PyObject* g_double_free = nullptr;

KVPool* pool_or_raise(PyObject* self) {
  KVPool* pool = reinterpret_cast<KVCore*>(self)->raw;
  if (pool == nullptr) PyErr_SetString(PyExc_RuntimeError, "KVBlockPool is not initialised");
  return pool;
}

PyObject* core_new(PyTypeObject* type, PyObject*, PyObject*) {
  auto* self = reinterpret_cast<KVCore*>(type->tp_alloc(type, 0));
  if (self) {
    self->pool = nullptr;
    self->raw = nullptr;
  }
  return reinterpret_cast<PyObject*>(self);
}

void core_dealloc(PyObject* self) {
  auto* core = reinterpret_cast<KVCore*>(self);
  delete core->pool;  // tensors viewing the arena hold their own reference
  Py_TYPE(self)->tp_free(self);
}

// A size argument of _init as a uint64_t. Not PyArg_ParseTuple's "K", which
// takes any int modulo 2^64 (2**64 + 4 blocks became 4): an int outside
// 0 .. 2^64-1 raises OverflowError naming the argument, a non-int TypeError.
bool size_arg(PyObject* obj, const char* name, uint64_t& out) {
  PyObject* index = PyNumber_Index(obj);
  if (!index) return false;
  out = PyLong_AsUnsignedLongLong(index);
  const bool ok = !(out == static_cast<uint64_t>(-1) && PyErr_Occurred());
  if (!ok) {
    PyErr_Clear();
    PyErr_Format(PyExc_OverflowError, "KVBlockPool: %s=%R is out of range (0 .. 2^64-1)", name, index);
  }
  Py_DECREF(index);
  return ok;
}

// _init(block_bytes, num_blocks, pinned: -1 auto / 0 / 1, numa_node, alignment)
PyObject* core_init(PyObject* self, PyObject* args) {
  PyObject *block_bytes = nullptr, *num_blocks = nullptr, *alignment = nullptr;
  int pinned = -1, numa_node = -1;
  if (!PyArg_ParseTuple(args, "OOiiO", &block_bytes, &num_blocks, &pinned, &numa_node, &alignment)) return nullptr;
  KVBlockPoolOptions o;
  if (!size_arg(block_bytes, "block_bytes", o.block_bytes) || !size_arg(num_blocks, "num_blocks", o.num_blocks) ||
      !size_arg(alignment, "alignment", o.alignment)) {
    return nullptr;
  }
  o.pinned = pinned < 0 ? HostPinned::best_effort : pinned ? HostPinned::on : HostPinned::off;
  o.numa_node = numa_node;
  std::shared_ptr<KVBlockPool> pool;
  try {
    pool = std::make_shared<KVBlockPool>(o);
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
    return nullptr;
  }
  set_kv_pool(self, std::move(pool));
  Py_RETURN_NONE;
}

// The ids of a contiguous 1-D CPU int64/int32 tensor, read or written in
// place. Checked field by field on the TensorImpl (each an inline load), not
// through at::Tensor's accessors, which check the same things again.
struct IdTensor {
  void* data = nullptr;
  int64_t n = 0;
  bool is64 = false;
};

// True and `ids` set if `obj` is such a tensor; false (no error set) if not.
// `write`: the ids will be written (a copy-on-write tensor gets its own copy
// first); otherwise only read. Always inlined: out of line, its caller read
// the IdTensor back with wider loads than the stores that wrote it, which
// the CPU cannot forward (a stall of ~10% of a hot free_and_alloc).
[[gnu::always_inline]] inline bool id_tensor(PyObject* obj, IdTensor& ids, bool write) {
  if (!THPVariable_Check(obj)) return false;
  c10::TensorImpl* t = THPVariable_Unpack(obj).unsafeGetTensorImpl();
  const auto dtype = c10::typeMetaToScalarType(t->dtype());
  // Layout first: is_contiguous() throws for a sparse tensor.
  if (t->device_type() != c10::DeviceType::CPU || t->layout() != c10::kStrided || t->dim() != 1 ||
      (dtype != at::kLong && dtype != at::kInt) || !t->is_contiguous()) {
    return false;
  }
  // The storage's pointer plus the offset, as TensorImpl::data() computes it
  // but without its second out-of-line has_storage() call. A tensor without
  // storage (a wrapper subclass) is not one; a storage that refuses access
  // throws, and is not one either.
  const c10::Storage& storage = t->unsafe_storage();
  if (!storage) return false;
  ids.n = t->numel();
  ids.is64 = dtype == at::kLong;
  ids.data = nullptr;
  if (ids.n == 0) return true;
  try {
    char* base = write ? static_cast<char*>(storage.mutable_data())
                       : static_cast<char*>(const_cast<void*>(storage.data()));
    ids.data = base + t->storage_offset() * (ids.is64 ? 8 : 4);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

constexpr const char* kOutRule = "out must be a contiguous 1-D int64 or int32 CPU tensor of at least n elements";

// Parses (n, out=None) from args[first...] and kwnames; -1 on error (raised).
long long parse_n_out(const char* signature, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                      Py_ssize_t first, PyObject*& out) {
  out = nullptr;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs < first + 1 || nargs + nkw > first + 2) {
    PyErr_Format(PyExc_TypeError, "%s", signature);
    return -1;
  }
  if (nargs == first + 2) out = args[first + 1];
  if (nkw == 1) {
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "out") != 0) {
      PyErr_Format(PyExc_TypeError, "%s: unexpected keyword", signature);
      return -1;
    }
    out = args[nargs];
  }
  // An int, not a float (1.5 blocks) nor one beyond 64 bits: either raises
  // naming n, as the other arguments' errors do.
  PyObject* index = PyNumber_Index(args[first]);
  if (!index) {
    PyErr_Format(PyExc_TypeError, "%s: n must be an int, got %s", signature, Py_TYPE(args[first])->tp_name);
    return -1;
  }
  const long long n = PyLong_AsLongLong(index);
  Py_DECREF(index);
  if (n == -1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_OverflowError, "%s: n=%R is out of range", signature, args[first]);
    return -1;
  }
  if (n < 0) {
    PyErr_Format(PyExc_ValueError, "%s: n must be >= 0", signature);
    return -1;
  }
  if (out == Py_None) out = nullptr;
  return n;
}

// The ids written into a new list (alloc without `out`).
PyObject* list_of(const std::vector<int64_t>& ids) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(ids.size()));
  if (!list) return nullptr;
  for (size_t i = 0; i < ids.size(); ++i) {
    PyObject* item = PyLong_FromLongLong(ids[i]);
    if (!item) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), item);
  }
  return list;
}

PyObject* core_alloc(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  KVPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  PyObject* out = nullptr;
  const long long n = parse_n_out("alloc(n, out=None)", args, nargs, kwnames, 0, out);
  if (n < 0) return nullptr;
  Status s;
  if (out) {
    IdTensor t;
    if (!id_tensor(out, t, /*write=*/true) || t.n < n) {
      PyErr_Format(PyExc_TypeError, "alloc(n, out): %s", kOutRule);
      return nullptr;
    }
    s = t.is64 ? pool->allocate(n, static_cast<int64_t*>(t.data)) : pool->allocate(n, static_cast<int32_t*>(t.data));
    if (s != Status::ok) {
      raise_kv_error(s);
      return nullptr;
    }
    Py_INCREF(out);
    return out;
  }
  // More than the pool holds is refused by the pool before it writes an id:
  // no buffer of n ids (2^40 of them would end the process with bad_alloc).
  std::vector<int64_t> ids(static_cast<uint64_t>(n) > pool->num_blocks() ? 1 : static_cast<size_t>(n));
  s = pool->allocate(static_cast<size_t>(n), ids.data());
  if (s != Status::ok) {
    raise_kv_error(s);
    return nullptr;
  }
  PyObject* list = list_of(ids);
  if (!list) pool->deallocate(ids.data(), ids.size());
  return list;
}

PyObject* core_free(PyObject* self, PyObject* ids) {
  KVPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  Status s;
  IdTensor t;
  if (id_tensor(ids, t, /*write=*/false)) {
    s = t.is64 ? pool->deallocate(static_cast<const int64_t*>(t.data), t.n)
               : pool->deallocate(static_cast<const int32_t*>(t.data), t.n);
  } else {
    std::vector<int64_t> v;
    if (!read_ids(ids, v)) return nullptr;
    s = pool->deallocate(v.data(), v.size());
  }
  if (s != Status::ok) {
    raise_kv_error(s);
    return nullptr;
  }
  Py_RETURN_NONE;
}

// free_and_alloc with the free ids at `f` (FreeId) and the new ones to `o`.
template <class FreeId>
Status free_then_alloc(KVPool* pool, const FreeId* f, size_t nf, size_t n, void* o, bool out64) {
  return out64 ? pool->deallocate_and_allocate(f, nf, n, static_cast<int64_t*>(o))
               : pool->deallocate_and_allocate(f, nf, n, static_cast<int32_t*>(o));
}

// free_and_alloc(ids, n, out=None): frees `ids`, then allocates n blocks,
// under one lock; refused as a whole (see KVBlockPool::free_and_alloc).
PyObject* core_free_and_alloc(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  KVPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  PyObject* out = nullptr;
  const char* signature = "free_and_alloc(ids, n, out=None)";
  if (nargs < 1) {
    PyErr_Format(PyExc_TypeError, "%s", signature);
    return nullptr;
  }
  const long long n = parse_n_out(signature, args, nargs, kwnames, 1, out);
  if (n < 0) return nullptr;
  IdTensor o;
  std::vector<int64_t> listed;
  if (out) {
    if (!id_tensor(out, o, /*write=*/true) || o.n < n) {
      PyErr_Format(PyExc_TypeError, "free_and_alloc(ids, n, out): %s", kOutRule);
      return nullptr;
    }
  } else {
    // As in alloc: n beyond the pool is refused before an id is written.
    listed.resize(static_cast<uint64_t>(n) > pool->num_blocks() ? 1 : static_cast<size_t>(n));
    o = {listed.data(), n, true};
  }
  IdTensor f;
  std::vector<int64_t> v;
  Status s;
  // free_and_alloc(out, n, out), the in-place step: out was checked above.
  const bool same = out != nullptr && args[0] == out;
  if (same) f = o;
  if (same || id_tensor(args[0], f, /*write=*/false)) {
    s = f.is64 ? free_then_alloc(pool, static_cast<const int64_t*>(f.data), f.n, n, o.data, o.is64)
               : free_then_alloc(pool, static_cast<const int32_t*>(f.data), f.n, n, o.data, o.is64);
  } else {
    if (!read_ids(args[0], v)) return nullptr;
    s = free_then_alloc(pool, v.data(), v.size(), n, o.data, o.is64);
  }
  if (s != Status::ok) {
    raise_kv_error(s);
    return nullptr;
  }
  if (out) {
    Py_INCREF(out);
    return out;
  }
  PyObject* list = list_of(listed);
  if (!list) pool->deallocate(listed.data(), listed.size());
  return list;
}

// True when every id of the batch is live (handed out, not freed). A batch
// of ids out of range is not live. Lets a transfer engine refuse to send to
// or from a freed block before it posts anything (unipool.nixl).
template <class Id>
bool all_live(const KVPool* pool, const Id* ids, int64_t n) {
  bool live = true;
  for (int64_t i = 0; i < n; ++i) live &= ids[i] >= 0 && pool->is_live(static_cast<uint64_t>(ids[i]));
  return live;
}

// is_live(id) -> bool; is_live(ids) -> bool, every id live.
PyObject* core_is_live(PyObject* self, PyObject* ids) {
  KVPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  if (PyLong_Check(ids)) {
    const long long id = PyLong_AsLongLong(ids);
    if (id == -1 && PyErr_Occurred()) return nullptr;
    return PyBool_FromLong(id >= 0 && pool->is_live(static_cast<uint64_t>(id)));
  }
  IdTensor t;
  if (id_tensor(ids, t, /*write=*/false)) {
    return PyBool_FromLong(t.is64 ? all_live(pool, static_cast<const int64_t*>(t.data), t.n)
                                  : all_live(pool, static_cast<const int32_t*>(t.data), t.n));
  }
  std::vector<int64_t> v;
  if (!read_ids(ids, v)) return nullptr;
  return PyBool_FromLong(all_live(pool, v.data(), static_cast<int64_t>(v.size())));
}

// The ids of `obj` (a tensor read in place, a list of ints read item by
// item without read_ids' per-item conversions, or anything read_ids takes)
// as int64 in `v`; false with a Python error set.
bool ids_into(PyObject* obj, std::vector<int64_t>& v) {
  IdTensor t;
  if (id_tensor(obj, t, /*write=*/false)) {
    v.resize(static_cast<size_t>(t.n));
    for (int64_t i = 0; i < t.n; ++i) {
      v[i] = t.is64 ? static_cast<const int64_t*>(t.data)[i] : static_cast<const int32_t*>(t.data)[i];
    }
    return true;
  }
  if (PyList_CheckExact(obj)) {
    const Py_ssize_t n = PyList_GET_SIZE(obj);
    v.resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PyList_GET_ITEM(obj, i);
      if (!PyLong_CheckExact(item)) return read_ids(obj, v);  // a bool, a numpy int: the general path
      v[i] = PyLong_AsLongLong(item);
      if (v[i] == -1 && PyErr_Occurred()) return false;
    }
    return true;
  }
  return read_ids(obj, v);
}

// Refuses the first id of `local` that is not a live block of the pool and
// the first of `remote` that `granted` (one byte per peer block) does not
// allow; nullptr and the error, or Py_None.
PyObject* check_transfer(const KVPool* pool, const std::vector<int64_t>& local, const std::vector<int64_t>& remote,
                         const uint8_t* granted, int64_t peer_blocks) {
  if (local.size() != remote.size()) {
    return PyErr_Format(PyExc_ValueError, "%zu local ids but %zu peer ids", local.size(), remote.size());
  }
  for (int64_t id : local) {
    if (id < 0 || static_cast<uint64_t>(id) >= pool->num_blocks()) {
      return PyErr_Format(PyExc_IndexError, "block id %lld out of range (pool of %llu blocks)",
                          static_cast<long long>(id), static_cast<unsigned long long>(pool->num_blocks()));
    }
    if (!pool->is_live(static_cast<uint64_t>(id))) {
      return PyErr_Format(PyExc_ValueError, "block %lld of this pool is not allocated (freed?)",
                          static_cast<long long>(id));
    }
  }
  for (int64_t id : remote) {
    if (id < 0 || id >= peer_blocks) {
      return PyErr_Format(PyExc_IndexError, "peer block id %lld out of range (the peer has %lld blocks)",
                          static_cast<long long>(id), static_cast<long long>(peer_blocks));
    }
    if (granted[id] == 0) {
      return PyErr_Format(PyExc_ValueError, "block %lld of the peer is not granted (freed by the peer?)",
                          static_cast<long long>(id));
    }
  }
  Py_RETURN_NONE;
}

// A contiguous 1-D int32 CPU tensor's data, or nullptr (no error set).
int32_t* int32_buffer(PyObject* obj, int64_t& size) {
  if (!THPVariable_Check(obj)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (t.device().type() != c10::DeviceType::CPU || t.dim() != 1 || !t.is_contiguous() || t.scalar_type() != at::kInt) {
    return nullptr;
  }
  size = t.numel();
  return t.data_ptr<int32_t>();
}

// _transfer_indices(ids, peer_ids, granted, out_local, out_remote) -> n:
// the descriptor indices of a transfer (int32, as NIXL takes them), checked
// and written in one call (unipool.nixl.KVAgent.transfer_indices).
// `granted`: a 1-D uint8 or bool CPU tensor, one entry per peer block; the
// outputs: 1-D int32 CPU tensors, reused from call to call.
PyObject* core_transfer_indices(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  KVPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  int64_t local_cap = 0, remote_cap = 0;
  int32_t* out_local = nargs == 5 ? int32_buffer(args[3], local_cap) : nullptr;
  int32_t* out_remote = nargs == 5 ? int32_buffer(args[4], remote_cap) : nullptr;
  if (!out_local || !out_remote || !THPVariable_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "_transfer_indices(ids, peer_ids, granted, out_local, out_remote: int32 tensors)");
    return nullptr;
  }
  const at::Tensor& granted = THPVariable_Unpack(args[2]);
  if (granted.device().type() != c10::DeviceType::CPU || granted.dim() != 1 || !granted.is_contiguous() ||
      (granted.scalar_type() != at::kByte && granted.scalar_type() != at::kBool)) {
    PyErr_SetString(PyExc_TypeError, "_transfer_indices: granted must be a contiguous 1-D uint8/bool CPU tensor");
    return nullptr;
  }
  std::vector<int64_t> local, remote;
  if (!ids_into(args[0], local) || !ids_into(args[1], remote)) return nullptr;
  PyObject* ok =
      check_transfer(pool, local, remote, static_cast<const uint8_t*>(granted.const_data_ptr()), granted.numel());
  if (!ok) return nullptr;
  Py_DECREF(ok);
  if (static_cast<int64_t>(local.size()) > std::min(local_cap, remote_cap)) {
    return PyErr_Format(PyExc_ValueError, "%zu blocks in one transfer: more than either pool holds", local.size());
  }
  for (size_t i = 0; i < local.size(); ++i) {
    out_local[i] = static_cast<int32_t>(local[i]);
    out_remote[i] = static_cast<int32_t>(remote[i]);
  }
  return PyLong_FromSize_t(local.size());
}

PyObject* core_noop(PyObject*, PyObject*) { Py_RETURN_NONE; }

PyObject* core_validate(PyObject* self, PyObject*) {
  KVPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  std::string why;
  if (!pool->validate(&why)) {
    PyErr_Format(PyExc_AssertionError, "KVBlockPool invariant broken: %s", why.c_str());
    return nullptr;
  }
  Py_RETURN_TRUE;
}

PyObject* core_collect(PyObject* self, PyObject*) {
  KVPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  return PyLong_FromSize_t(pool->collect_deferred());
}

PyObject* core_reset_peak_stats(PyObject* self, PyObject*) {
  KVPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  pool->reset_peak_stats();
  Py_RETURN_NONE;
}

PyObject* core_stats(PyObject* self, PyObject*) {
  KVPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  const KVBlockPoolStats s = pool->stats();
  PyObject* d = PyDict_New();
  auto put = [&](const char* k, uint64_t v) {
    PyObject* o = PyLong_FromUnsignedLongLong(v);
    PyDict_SetItemString(d, k, o);
    Py_DECREF(o);
  };
  put("num_blocks", s.num_blocks);
  put("block_bytes", s.block_bytes);
  put("stride", s.stride);
  put("free_blocks", s.free_blocks);
  put("live_blocks", s.live_blocks);
  put("deferred_blocks", s.deferred_blocks);
  put("peak_live_blocks", s.peak_live_blocks);
  put("requested_bytes", s.requested_bytes);
  put("reserved_bytes", s.reserved_bytes);
  put("pinned_bytes", s.pinned_bytes);
  put("allocs", s.allocs);
  put("frees", s.frees);
  put("failed_allocs", s.failed_allocs);
  put("misuse_errors", s.misuse_errors);
  PyObject* state = PyUnicode_FromString(to_string(pool->pinning_state()));
  PyDict_SetItemString(d, "pinning_state", state);
  Py_DECREF(state);
  return d;
}

PyObject* get_u64(PyObject* self, uint64_t (KVPool::*f)() const noexcept) {
  KVPool* pool = pool_or_raise(self);
  return pool ? PyLong_FromUnsignedLongLong((pool->*f)()) : nullptr;
}
PyObject* get_block_bytes(PyObject* self, void*) { return get_u64(self, &KVPool::block_bytes); }
PyObject* get_num_blocks(PyObject* self, void*) { return get_u64(self, &KVPool::num_blocks); }
PyObject* get_stride(PyObject* self, void*) { return get_u64(self, &KVPool::stride); }
PyObject* get_free_blocks(PyObject* self, void*) {
  KVPool* pool = pool_or_raise(self);
  return pool ? PyLong_FromSize_t(pool->free_blocks()) : nullptr;
}
PyObject* get_pinned(PyObject* self, void*) {
  KVPool* pool = pool_or_raise(self);
  return pool ? PyBool_FromLong(pool->pinned()) : nullptr;
}
PyObject* get_pinning_state(PyObject* self, void*) {
  KVPool* pool = pool_or_raise(self);
  return pool ? PyUnicode_FromString(to_string(pool->pinning_state())) : nullptr;
}

PyMethodDef g_methods[] = {
    {"_init", core_init, METH_VARARGS, "_init(block_bytes, num_blocks, pinned, numa_node, alignment)"},
    {"alloc", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(core_alloc)), METH_FASTCALL | METH_KEYWORDS,
     "alloc(n, out=None) -> block ids: a list, or `out` (a 1-D int64/int32 CPU tensor) filled with them"},
    {"free", core_free, METH_O, "free(ids): return blocks (tensor, list or tuple of ids); a double free raises"},
    {"free_and_alloc", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(core_free_and_alloc)),
     METH_FASTCALL | METH_KEYWORDS,
     "free_and_alloc(ids, n, out=None): free ids, then allocate n blocks (a list, or into `out`, which may be "
     "`ids` itself), in one call; refused as a whole"},
    {"collect_deferred", core_collect, METH_NOARGS, "free the deferred blocks whose fences completed"},
    {"_transfer_indices", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(core_transfer_indices)),
     METH_FASTCALL, "_transfer_indices(ids, peer_ids, granted, out_local, out_remote) -> n, checked"},
    {"is_live", core_is_live, METH_O,
     "is_live(id) or is_live(ids): whether the id (every id) is handed out and not freed"},
    {"stats", core_stats, METH_NOARGS, "counters of the pool"},
    {"reset_peak_stats", core_reset_peak_stats, METH_NOARGS, "peak_live_blocks := live_blocks"},
    {"validate", core_validate, METH_NOARGS, "check every invariant (raises AssertionError)"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef g_getset[] = {
    {"block_bytes", get_block_bytes, nullptr, "bytes of one block", nullptr},
    {"num_blocks", get_num_blocks, nullptr, "blocks in the arena", nullptr},
    {"stride", get_stride, nullptr, "bytes from one block to the next", nullptr},
    {"free_blocks", get_free_blocks, nullptr, "blocks free now", nullptr},
    {"pinned", get_pinned, nullptr, "whether the whole arena is pinned", nullptr},
    {"pinning_state", get_pinning_state, nullptr, "pinned, or why not", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject g_type = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "unipool._C._KVCore";
  t.tp_basicsize = sizeof(KVCore);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  t.tp_doc = "KV block pool core (see unipool.KVBlockPool)";
  t.tp_new = core_new;
  t.tp_dealloc = core_dealloc;
  t.tp_methods = g_methods;
  t.tp_getset = g_getset;
  return t;
}();

// unipool._testing.EmptyMethods().noop(): an empty METH_NOARGS method, the
// cheapest call into the extension there is. The KV benchmark compares the
// pool's methods, which are called the same way, against it.
PyMethodDef g_empty_methods[] = {
    {"noop", core_noop, METH_NOARGS, "an empty call into the extension (benchmark reference)"},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject g_empty_type = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "unipool._testing.EmptyMethods";
  t.tp_basicsize = sizeof(PyObject);
  t.tp_flags = Py_TPFLAGS_DEFAULT;
  t.tp_doc = "an object whose noop() method does nothing (benchmark reference)";
  t.tp_new = PyType_GenericNew;
  t.tp_methods = g_empty_methods;
  return t;
}();

}  // namespace

bool add_empty_methods_type(PyObject* module) {
  if (PyType_Ready(&g_empty_type) < 0) return false;
  Py_INCREF(&g_empty_type);
  return PyModule_AddObject(module, "EmptyMethods", reinterpret_cast<PyObject*>(&g_empty_type)) == 0;
}

namespace {

// One id of a list: an int (not a float, which would name another block)
// within 64 bits; the error names the argument.
bool read_id(PyObject* item, int64_t& id) {
  if (PyLong_CheckExact(item)) {  // the common case, without a new reference
    id = PyLong_AsLongLong(item);
  } else {
    PyObject* index = PyNumber_Index(item);  // int-likes (numpy's), not floats
    if (!index) {
      PyErr_Format(PyExc_TypeError, "block ids must be ints, got %s %R", Py_TYPE(item)->tp_name, item);
      return false;
    }
    id = PyLong_AsLongLong(index);
    Py_DECREF(index);
  }
  if (id == -1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_OverflowError, "block ids: %R is out of range", item);
    return false;
  }
  return true;
}

}  // namespace

bool read_ids(PyObject* ids, std::vector<int64_t>& v) {
  if (THPVariable_Check(ids)) {
    // Any device, any integer dtype, any strides: converted. A float would
    // be truncated to another block's id, and torch throws C++ exceptions
    // for some layouts (sparse); both become a Python TypeError here.
    const at::Tensor& src = THPVariable_Unpack(ids);
    if (src.layout() != at::kStrided || !at::isIntegralType(src.scalar_type(), /*includeBool=*/false) ||
        src.dim() > 1) {
      PyErr_SetString(PyExc_TypeError, "block ids must be a dense 1-D tensor of integers, a list or a tuple");
      return false;
    }
    try {
      const at::Tensor t = src.to(at::kCPU).to(at::kLong).contiguous();
      const int64_t* p = t.data_ptr<int64_t>();
      v.assign(p, p + t.numel());
    } catch (const std::exception& e) {
      PyErr_Format(PyExc_TypeError, "block ids: %s", e.what());
      return false;
    }
    return true;
  }
  if (PyLong_Check(ids)) {
    v.resize(1);
    return read_id(ids, v[0]);
  }
  // A str is a sequence too, of strs: refused here, naming what is expected.
  PyObject* seq = PyUnicode_Check(ids) || PyBytes_Check(ids) ? nullptr : PySequence_Fast(ids, "");
  if (!seq) {
    PyErr_Format(PyExc_TypeError, "block ids must be a tensor, a list or a tuple of ints, got %s",
                 Py_TYPE(ids)->tp_name);
    return false;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  v.resize(static_cast<size_t>(n));
  PyObject** items = PySequence_Fast_ITEMS(seq);
  bool ok = true;
  for (Py_ssize_t i = 0; i < n && ok; ++i) ok = read_id(items[i], v[i]);
  Py_DECREF(seq);
  return ok;
}

void raise_kv_error(Status s) {
  // bad_argument: a bad fence, not a bad block id.
  PyObject* type = s == Status::out_of_space ? g_exhausted : s == Status::bad_argument ? PyExc_ValueError : g_double_free;
  PyErr_SetString(type, KVPool::last_error());
}

void set_kv_pool(PyObject* obj, std::shared_ptr<KVPool> pool) {
  auto* core = reinterpret_cast<KVCore*>(obj);
  delete core->pool;
  core->raw = pool.get();
  core->pool = new std::shared_ptr<KVPool>(std::move(pool));
}

std::shared_ptr<KVPool> kv_pool_of(PyObject* obj) {
  if (!PyObject_TypeCheck(obj, &g_type)) {
    PyErr_SetString(PyExc_TypeError, "expected a unipool.KVBlockPool");
    return nullptr;
  }
  auto* core = reinterpret_cast<KVCore*>(obj);
  if (core->pool == nullptr || !*core->pool) {
    PyErr_SetString(PyExc_RuntimeError, "KVBlockPool is not initialised");
    return nullptr;
  }
  return *core->pool;
}

bool add_kv_core_type(PyObject* module) {
  if (PyType_Ready(&g_type) < 0) return false;
  Py_INCREF(&g_type);
  if (PyModule_AddObject(module, "_KVCore", reinterpret_cast<PyObject*>(&g_type)) < 0) return false;
  g_exhausted = PyErr_NewExceptionWithDoc("unipool._C.KVPoolExhaustedError",
                                          "The KV block pool has fewer free blocks than asked for.",
                                          PyExc_MemoryError, nullptr);
  g_double_free = PyErr_NewExceptionWithDoc("unipool._C.KVDoubleFreeError",
                                            "A block id that is not allocated (double free), out of range "
                                            "or repeated in the batch.",
                                            PyExc_ValueError, nullptr);
  if (!g_exhausted || !g_double_free) return false;
  Py_INCREF(g_exhausted);
  Py_INCREF(g_double_free);
  return PyModule_AddObject(module, "KVPoolExhaustedError", g_exhausted) == 0 &&
         PyModule_AddObject(module, "KVDoubleFreeError", g_double_free) == 0;
}

}  // namespace unipool::torch_ext
