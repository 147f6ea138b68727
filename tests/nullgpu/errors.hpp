// unipool null GPU: error names and texts, for the codes the null GPU
// produces plus the common sticky ones (errors_runtime.cpp,
// errors_driver.cpp). Never counted.
#pragma once

#include <cstddef>

namespace unipool::nullgpu::detail {

struct ErrorText {
  int code;
  const char* name;
  const char* text;
};

template <size_t N>
const ErrorText* find_error(const ErrorText (&table)[N], int code) {
  for (const ErrorText& entry : table) {
    if (entry.code == code) return &entry;
  }
  return nullptr;
}

}  // namespace unipool::nullgpu::detail
