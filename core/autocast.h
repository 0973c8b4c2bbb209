// Autocast for a scope (the forward pass, or its recomputation under activation checkpointing) on
// one device type: CUDA, or the CPU (a bf16-master-weight run there, and the tests), restoring the
// previous state and dtype on exit and dropping the cached weight casts when the outermost scope
// closes (weights change every step).
#pragma once

#include <ATen/autocast_mode.h>

namespace tt {

class AutocastScope {
 public:
  explicit AutocastScope(bool enabled, at::ScalarType dtype = at::kBFloat16, at::DeviceType device_type = at::kCUDA)
      : enabled_(enabled), device_type_(device_type) {
    if (!enabled_) return;
    previous_ = at::autocast::is_autocast_enabled(device_type_);
    previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
    at::autocast::set_autocast_enabled(device_type_, true);
    at::autocast::set_autocast_dtype(device_type_, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_type_, previous_);
    at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  at::DeviceType device_type_;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

}  // namespace tt
