// unipool torch extension: the torch side of the KV block pool: the arena as
// one tensor, batched block copies, free after a stream's work.
#include <ATen/ATen.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

#include "kv_pybind.hpp"
#include "unipool_torch.hpp"

namespace unipool::torch_ext {
namespace {

// The whole arena as a tensor [num_blocks, *block_shape] of `dtype`. The
// tensor (and every view of it) keeps the pool's memory alive.
at::Tensor arena_tensor(const py::object& obj, std::vector<int64_t> block_shape, py::object dtype_obj) {
  std::shared_ptr<KVPool> pool = pool_of(obj);
  TORCH_CHECK_TYPE(THPDtype_Check(dtype_obj.ptr()), "dtype must be a torch.dtype");
  const at::ScalarType dtype = reinterpret_cast<THPDtype*>(dtype_obj.ptr())->scalar_type;
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t elems = 1;
  for (int64_t d : block_shape) elems *= d;
  TORCH_CHECK_VALUE(static_cast<uint64_t>(elems * item) == pool->block_bytes(), "block_shape x dtype is ",
                    elems * item, " bytes but the pool's blocks are ", pool->block_bytes());
  TORCH_CHECK_VALUE(pool->stride() % item == 0, "block stride not a multiple of the dtype size");
  std::vector<int64_t> sizes{static_cast<int64_t>(pool->num_blocks())};
  sizes.insert(sizes.end(), block_shape.begin(), block_shape.end());
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 1;) {
    strides[i] = s;
    s *= sizes[i];
  }
  strides[0] = static_cast<int64_t>(pool->stride()) / item;
  return at::from_blob(
      pool->base(), sizes, strides, [pool](void*) mutable { pool.reset(); },
      at::TensorOptions().dtype(dtype).device(at::kCPU));
}

// Copies blocks between the arena and `other` (any device): to_device:
// other[dst[i]] <- arena[ids[i]], else arena[ids[i]] <- other[dst[i]]; dst
// defaults to 0..n-1. Runs of consecutive ids (and slots) become one copy.
// Every id must be allocated: a freed block may be another request's now,
// and a copy into it would overwrite that request's KV. All are checked
// before the first copy, so a refused call copies nothing.
void copy_blocks(const py::object& pool_obj, const at::Tensor& arena, const py::object& ids_obj, at::Tensor other,
                 const py::object& dst_obj, bool to_device, bool non_blocking) {
  const std::shared_ptr<KVPool> pool = pool_of(pool_obj);
  const std::vector<int64_t> ids = ids_of(ids_obj);
  std::vector<int64_t> dst;
  if (dst_obj.is_none()) {
    dst.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) dst[i] = static_cast<int64_t>(i);
  } else {
    dst = ids_of(dst_obj);
  }
  TORCH_CHECK_VALUE(dst.size() == ids.size(), "ids and destination slots differ in length");
  TORCH_CHECK_VALUE(other.dim() == arena.dim() && other.sizes().slice(1) == arena.sizes().slice(1),
                    "the tensor must be [n, *block_shape] with the pool's block shape; got ", other.sizes());
  TORCH_CHECK_VALUE(other.scalar_type() == arena.scalar_type(), "dtype differs from the pool's");
  const int64_t num_blocks = arena.size(0);
  for (size_t i = 0; i < ids.size(); ++i) {
    TORCH_CHECK_INDEX(ids[i] >= 0 && ids[i] < num_blocks, "block id ", ids[i], " out of range");
    TORCH_CHECK_VALUE(pool->is_live(static_cast<uint64_t>(ids[i])), "KVBlockPool.",
                      to_device ? "copy_to_device" : "copy_from_device", ": block ", ids[i],
                      " is not allocated (free, or freed and waiting on a fence); nothing was copied");
    TORCH_CHECK_INDEX(dst[i] >= 0 && dst[i] < other.size(0), "slot ", dst[i], " out of range");
  }
  size_t i = 0;
  while (i < ids.size()) {
    size_t j = i + 1;
    while (j < ids.size() && ids[j] == ids[j - 1] + 1 && dst[j] == dst[j - 1] + 1) ++j;
    const int64_t n = static_cast<int64_t>(j - i);
    at::Tensor host = arena.narrow(0, ids[i], n);
    at::Tensor dev = other.narrow(0, dst[i], n);
    if (to_device) {
      dev.copy_(host, non_blocking);
    } else {
      host.copy_(dev, non_blocking);
    }
    i = j;
  }
}

// Frees `ids` once the work queued so far on `stream` (a cudaStream_t value)
// is done. Without CUDA fences (CPU-only builds) copies were synchronous, so
// the blocks are freed at once.
void free_after(const py::object& obj, const py::object& ids_obj, int device, uint64_t stream) {
  std::shared_ptr<KVPool> pool = pool_of(obj);
  const std::vector<int64_t> ids = ids_of(ids_obj);
  FenceSource* fences = cuda_hooks().fences ? cuda_hooks().fences() : nullptr;
  Status s;
  if (fences == nullptr) {
    s = pool->deallocate(ids.data(), ids.size());
  } else {
    const FenceId f = fences->record(device, stream);
    s = f == kNoFence
            ? pool->deallocate(ids.data(), ids.size())  // cannot fence: the caller's stream error surfaces in torch
            : pool->deallocate_after(ids.data(), ids.size(), *fences, f);
  }
  check_kv(s);
}

}  // namespace

void bind_kv_pool(py::module_& m) {
  m.def("_kv_arena", &arena_tensor);
  m.def("_kv_copy", &copy_blocks, py::arg("pool"), py::arg("arena"), py::arg("ids"), py::arg("other"), py::arg("dst"),
        py::arg("to_device"), py::arg("non_blocking"));
  m.def("_kv_free_after", &free_after);
  m.def("_kv_has_fences", [] { return cuda_hooks().fences != nullptr && cuda_hooks().fences() != nullptr; });
}

}  // namespace unipool::torch_ext
