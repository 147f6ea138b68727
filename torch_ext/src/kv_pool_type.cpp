// unipool torch extension: the _KVCore CPython type (see kv_pool_type.hpp).
#include "kv_pool_type.hpp"

#include <torch/csrc/autograd/python_variable.h>

#include <new>
#include <string>
#include <vector>

namespace unipool::torch_ext {
namespace {

struct KVCore {
  PyObject_HEAD
  std::shared_ptr<KVBlockPool>* pool;  // heap-held so the struct stays plain C
};

PyObject* g_exhausted = nullptr;
PyObject* g_double_free = nullptr;

KVBlockPool* pool_or_raise(PyObject* self) {
  auto* core = reinterpret_cast<KVCore*>(self);
  if (core->pool == nullptr || !*core->pool) {
    PyErr_SetString(PyExc_RuntimeError, "KVBlockPool is not initialised");
    return nullptr;
  }
  return core->pool->get();
}

PyObject* core_new(PyTypeObject* type, PyObject*, PyObject*) {
  auto* self = reinterpret_cast<KVCore*>(type->tp_alloc(type, 0));
  if (self) self->pool = nullptr;
  return reinterpret_cast<PyObject*>(self);
}

void core_dealloc(PyObject* self) {
  auto* core = reinterpret_cast<KVCore*>(self);
  delete core->pool;  // tensors viewing the arena hold their own reference
  Py_TYPE(self)->tp_free(self);
}

// _init(block_bytes, num_blocks, pinned: -1 auto / 0 / 1, numa_node, alignment)
PyObject* core_init(PyObject* self, PyObject* args) {
  unsigned long long block_bytes = 0, num_blocks = 0, alignment = 256;
  int pinned = -1, numa_node = -1;
  if (!PyArg_ParseTuple(args, "KKiiK", &block_bytes, &num_blocks, &pinned, &numa_node, &alignment)) return nullptr;
  KVBlockPoolOptions o;
  o.block_bytes = block_bytes;
  o.num_blocks = num_blocks;
  o.alignment = alignment;
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
  auto* core = reinterpret_cast<KVCore*>(self);
  delete core->pool;
  core->pool = new std::shared_ptr<KVBlockPool>(std::move(pool));
  Py_RETURN_NONE;
}

// Writes ids into a 1-D CPU int64/int32 tensor `out` (numel >= n).
template <class Id>
Status alloc_into(KVBlockPool* pool, size_t n, const at::Tensor& out) {
  return pool->alloc(n, out.data_ptr<Id>());
}

PyObject* core_alloc(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  KVBlockPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  PyObject* out = nullptr;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw < 1 || nargs + nkw > 2 || nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "alloc(n, out=None)");
    return nullptr;
  }
  if (nargs == 2) out = args[1];
  if (nkw == 1) {
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "out") != 0) {
      PyErr_SetString(PyExc_TypeError, "alloc(n, out=None): unexpected keyword");
      return nullptr;
    }
    out = args[nargs];
  }
  const long long n = PyLong_AsLongLong(args[0]);
  if (n == -1 && PyErr_Occurred()) return nullptr;
  if (n < 0) {
    PyErr_SetString(PyExc_ValueError, "alloc(n): n must be >= 0");
    return nullptr;
  }
  if (out != nullptr && out != Py_None) {
    if (!THPVariable_Check(out)) {
      PyErr_SetString(PyExc_TypeError, "alloc(n, out): out must be a 1-D int64 or int32 CPU tensor");
      return nullptr;
    }
    const at::Tensor& t = THPVariable_Unpack(out);
    const auto dtype = t.scalar_type();
    if (!t.device().is_cpu() || t.dim() != 1 || !t.is_contiguous() ||
        (dtype != at::kLong && dtype != at::kInt) || t.numel() < n) {
      PyErr_SetString(PyExc_TypeError,
                      "alloc(n, out): out must be a contiguous 1-D int64 or int32 CPU tensor of at least n elements");
      return nullptr;
    }
    const Status s = dtype == at::kLong ? alloc_into<int64_t>(pool, n, t) : alloc_into<int32_t>(pool, n, t);
    if (s != Status::ok) {
      raise_kv_error(s);
      return nullptr;
    }
    Py_INCREF(out);
    return out;
  }
  std::vector<int64_t> ids(static_cast<size_t>(n));
  const Status s = pool->alloc(ids.size(), ids.data());
  if (s != Status::ok) {
    raise_kv_error(s);
    return nullptr;
  }
  PyObject* list = PyList_New(n);
  if (!list) {
    pool->free(ids.data(), ids.size());
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) PyList_SET_ITEM(list, i, PyLong_FromLongLong(ids[i]));
  return list;
}

PyObject* core_free(PyObject* self, PyObject* ids) {
  KVBlockPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  Status s;
  if (THPVariable_Check(ids)) {
    const at::Tensor& t = THPVariable_Unpack(ids);
    const auto dtype = t.scalar_type();
    if (t.device().is_cpu() && t.dim() == 1 && t.is_contiguous() && (dtype == at::kLong || dtype == at::kInt)) {
      s = dtype == at::kLong ? pool->free(t.data_ptr<int64_t>(), t.numel())
                             : pool->free(t.data_ptr<int32_t>(), t.numel());
      if (s != Status::ok) {
        raise_kv_error(s);
        return nullptr;
      }
      Py_RETURN_NONE;
    }
  }
  std::vector<int64_t> v;
  if (!read_ids(ids, v)) return nullptr;
  s = pool->free(v.data(), v.size());
  if (s != Status::ok) {
    raise_kv_error(s);
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* core_noop(PyObject*, PyObject*) { Py_RETURN_NONE; }

PyObject* core_validate(PyObject* self, PyObject*) {
  KVBlockPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  std::string why;
  if (!pool->validate(&why)) {
    PyErr_Format(PyExc_AssertionError, "KVBlockPool invariant broken: %s", why.c_str());
    return nullptr;
  }
  Py_RETURN_TRUE;
}

PyObject* core_collect(PyObject* self, PyObject*) {
  KVBlockPool* pool = pool_or_raise(self);
  if (!pool) return nullptr;
  return PyLong_FromSize_t(pool->collect_deferred());
}

PyObject* core_stats(PyObject* self, PyObject*) {
  KVBlockPool* pool = pool_or_raise(self);
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
  PyObject* state = PyUnicode_FromString(pool->pinning_state());
  PyDict_SetItemString(d, "pinning_state", state);
  Py_DECREF(state);
  return d;
}

PyObject* get_u64(PyObject* self, uint64_t (KVBlockPool::*f)() const noexcept) {
  KVBlockPool* pool = pool_or_raise(self);
  return pool ? PyLong_FromUnsignedLongLong((pool->*f)()) : nullptr;
}
PyObject* get_block_bytes(PyObject* self, void*) { return get_u64(self, &KVBlockPool::block_bytes); }
PyObject* get_num_blocks(PyObject* self, void*) { return get_u64(self, &KVBlockPool::num_blocks); }
PyObject* get_stride(PyObject* self, void*) { return get_u64(self, &KVBlockPool::stride); }
PyObject* get_free_blocks(PyObject* self, void*) {
  KVBlockPool* pool = pool_or_raise(self);
  return pool ? PyLong_FromSize_t(pool->free_blocks()) : nullptr;
}
PyObject* get_pinned(PyObject* self, void*) {
  KVBlockPool* pool = pool_or_raise(self);
  return pool ? PyBool_FromLong(pool->pinned()) : nullptr;
}
PyObject* get_pinning_state(PyObject* self, void*) {
  KVBlockPool* pool = pool_or_raise(self);
  return pool ? PyUnicode_FromString(pool->pinning_state()) : nullptr;
}

PyMethodDef g_methods[] = {
    {"_init", core_init, METH_VARARGS, "_init(block_bytes, num_blocks, pinned, numa_node, alignment)"},
    {"alloc", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(core_alloc)), METH_FASTCALL | METH_KEYWORDS,
     "alloc(n, out=None) -> block ids: a list, or `out` (a 1-D int64/int32 CPU tensor) filled with them"},
    {"free", core_free, METH_O, "free(ids): return blocks (tensor, list or tuple of ids); a double free raises"},
    {"collect_deferred", core_collect, METH_NOARGS, "free the deferred blocks whose fences completed"},
    {"stats", core_stats, METH_NOARGS, "counters of the pool"},
    {"validate", core_validate, METH_NOARGS, "check every invariant (raises AssertionError)"},
    {"_noop", core_noop, METH_NOARGS, "an empty call into the extension (benchmark reference)"},
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

}  // namespace

bool read_ids(PyObject* ids, std::vector<int64_t>& v) {
  if (THPVariable_Check(ids)) {
    const at::Tensor t = THPVariable_Unpack(ids).to(at::kCPU).to(at::kLong).contiguous();
    if (t.dim() > 1) {
      PyErr_SetString(PyExc_TypeError, "block ids must be a 1-D tensor");
      return false;
    }
    const int64_t* p = t.data_ptr<int64_t>();
    v.assign(p, p + t.numel());
    return true;
  }
  if (PyLong_Check(ids)) {
    v.assign(1, PyLong_AsLongLong(ids));
    return !PyErr_Occurred();
  }
  PyObject* seq = PySequence_Fast(ids, "block ids must be a tensor, a list or a tuple of ints");
  if (!seq) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  v.resize(static_cast<size_t>(n));
  PyObject** items = PySequence_Fast_ITEMS(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    v[i] = PyLong_AsLongLong(items[i]);
    if (v[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return false;
    }
  }
  Py_DECREF(seq);
  return true;
}

void raise_kv_error(Status s) {
  PyErr_SetString(s == Status::out_of_space ? g_exhausted : g_double_free, KVBlockPool::last_error());
}

std::shared_ptr<KVBlockPool> kv_pool_of(PyObject* obj) {
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
