// unipool null GPU: every CUDA runtime function the null GPU does not
// implement, as a loud stub (unimplemented.hpp). No CUDA header here.
#include "nullgpu/unimplemented.hpp"

// cudaErrorNotSupported; the header cannot be included beside the stubs.
constexpr int kNotSupported = 801;

#define UNIPOOL_NULLGPU_STUB(name) UNIPOOL_NULLGPU_UNIMPLEMENTED(name, kNotSupported)
#include "nullgpu/cudart_unimplemented.def"
