// unipool host: a pinner that tells the pool's history what it pinned. The
// engine pins in several places (an arena's growth, the pinning thread's
// chunks ahead, huge mappings) and unpins in as many; wrapping the one pinner
// they all call records each of them without a hook at every site.
#pragma once

#include <memory>

#include "backend/host_pinner.hpp"
#include "host/history.hpp"

namespace unipool::host {

class HistoryPinner final : public backend::HostPinner {
 public:
  HistoryPinner(std::unique_ptr<backend::HostPinner> inner, History* history)
      : inner_(std::move(inner)), history_(history) {}

  const char* name() const noexcept override { return inner_->name(); }
  bool available() override { return inner_->available(); }
  const char* unavailable_reason() const noexcept override { return inner_->unavailable_reason(); }
  BackendStatus pin(void* ptr, uint64_t bytes) override {
    const BackendStatus s = inner_->pin(ptr, bytes);
    if (history_->on())
      history_->record(s.is_ok() ? HostHistoryAction::pin : HostHistoryAction::pin_failed, ptr, bytes);
    return s;
  }
  BackendStatus unpin(void* ptr) override {
    if (history_->on()) history_->record(HostHistoryAction::unpin, ptr, 0);
    return inner_->unpin(ptr);
  }

 private:
  std::unique_ptr<backend::HostPinner> inner_;
  History* history_;
};

}  // namespace unipool::host
