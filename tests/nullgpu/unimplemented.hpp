// unipool null GPU: what a call the null GPU does not implement does. It
// fails loudly: the first call of each such function prints its name to
// stderr ("unipool null GPU: cudaFoo is not implemented"), and every call
// returns the library's "not supported" error. An unknown call never
// succeeds silently.
//
// Each stand-in library (libcudart.so.13, libcuda.so.1, libcublas.so.13,
// libcublasLt.so.13) exports every function of the real library that it
// does not implement as such a stub, from a list in a .def file:
//
//   #define UNIPOOL_NULLGPU_STUB(name) UNIPOOL_NULLGPU_UNIMPLEMENTED(name, cudaErrorNotSupported)
//   #include "nullgpu/cudart_unimplemented.def"
//
// A stub takes no declared arguments: callers pass theirs in registers and
// the stub ignores them, which the x86-64 and AArch64 C ABIs allow. The
// translation unit that defines stubs must not include the library's
// header (the prototypes would clash).
#pragma once

namespace unipool::nullgpu::detail {
// Prints "unipool null GPU: <function> is not implemented" the first time
// it is called for `function`; thread-safe, never throws.
void report_unimplemented(const char* function) noexcept;
}  // namespace unipool::nullgpu::detail

#define UNIPOOL_NULLGPU_UNIMPLEMENTED(name, error)                  \
  extern "C" __attribute__((visibility("default"))) int name() {    \
    ::unipool::nullgpu::detail::report_unimplemented(#name);        \
    return (error);                                                 \
  }
