// unipool C ABI: the per-thread last error message behind unipool_last_error().
#pragma once

#include <string>

namespace unipool::capi {

void set_last_error(std::string message);
void clear_last_error();
const char* last_error() noexcept;

}  // namespace unipool::capi
