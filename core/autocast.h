// CUDA autocast for a scope (the forward pass, or its recomputation under activation
// checkpointing), restoring the previous state and dtype on exit and dropping the cached weight
// casts when the outermost scope closes (weights change every step).
#pragma once

#include <ATen/autocast_mode.h>

namespace tt {

class AutocastScope {
 public:
  explicit AutocastScope(bool enabled, at::ScalarType dtype = at::kBFloat16) : enabled_(enabled) {
    if (!enabled_) return;
    previous_ = at::autocast::is_autocast_enabled(at::kCUDA);
    previous_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, previous_);
    at::autocast::set_autocast_dtype(at::kCUDA, previous_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

}  // namespace tt
