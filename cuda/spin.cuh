// Launcher of the spin-wait kernel (no torch here; see cuda/ops.h for the entry). A test and
// diagnostics tool: it holds a stream busy until another stream (or the host) writes a flag, so a
// cross-stream hazard can be made to happen every time instead of by chance.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// One thread on `stream` polls *flag (device memory, written by another stream) until it is
/// non-zero or `timeout_ns` of GPU time (%globaltimer) have passed; then writes 1 to *timed_out when
/// it gave up, 0 otherwise. Returns the launch status.
cudaError_t spin_until_set(const int32_t* flag, int32_t* timed_out, int64_t timeout_ns, cudaStream_t stream);

/// One thread on `stream` stays busy for `duration_ns` of GPU time (%globaltimer), waiting for
/// nothing else: a stream held for a fixed time that cannot deadlock. Returns the launch status.
cudaError_t busy_for(int64_t duration_ns, cudaStream_t stream);

}  // namespace tt::kernels
