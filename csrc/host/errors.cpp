// unipool host: per-thread last error.
#include "host/errors.hpp"

#include <atomic>
#include <cstring>

#include "core/number_text.hpp"

namespace unipool::host {
namespace {
thread_local Status t_status = Status::ok;
thread_local char t_message[256] = "";
std::atomic<CorruptionHandler> g_corruption_handler{nullptr};
}  // namespace

Message& Message::add(const char* text) noexcept {
  while (*text != '\0' && size_ + 1 < sizeof(text_)) text_[size_++] = *text++;
  text_[size_] = '\0';
  return *this;
}

Message& Message::add_hex(uint64_t value) noexcept { return add(to_hex(value).text); }

Message& Message::add_dec(uint64_t value) noexcept { return add(to_dec(value).text); }

Status fail(Status status, const Message& message) noexcept { return fail(status, message.c_str()); }

Status fail(Status status, const char* message) noexcept {
  t_status = status;
  const size_t n = std::strlen(message);
  const size_t keep = n < sizeof(t_message) - 1 ? n : sizeof(t_message) - 1;
  std::memcpy(t_message, message, keep);
  t_message[keep] = '\0';
  return status;
}

Status thread_last_status() noexcept { return t_status; }
const char* thread_last_error() noexcept { return t_message; }

void set_corruption_handler(CorruptionHandler handler) noexcept {
  g_corruption_handler.store(handler, std::memory_order_release);
}
CorruptionHandler corruption_handler() noexcept { return g_corruption_handler.load(std::memory_order_acquire); }

}  // namespace unipool::host
