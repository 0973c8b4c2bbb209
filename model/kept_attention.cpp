// Attention kept from a checkpointed block's first forward and replayed in its recompute (see
// kept_attention.h).
#include "model/kept_attention.h"

#include <ATen/SDPBackend.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>
#include <torch/torch.h>

#include <vector>

namespace tt {

// One attention call of a checkpointed block's first forward: whether it was kept and, if so, what
// the backend's backward needs besides q, k, v and the incoming gradient.
struct KeptCall {
  bool kept = false;
  at::SDPBackend backend = at::SDPBackend::error;
  bool cuda = false;
  std::vector<int64_t> q_sizes, k_sizes, v_sizes;
  at::ScalarType dtype = at::kFloat;
  torch::Tensor out;  // (B, H, Nq, D), the backend's output (its strides as the backend made them)
  torch::Tensor lse;  // (B, H, Nq) fp32 log-sum-exp of the scores
  torch::Tensor cum_q, cum_k, seed, offset;  // CUDA backends' bookkeeping (empty for dense inputs)
  int64_t max_q = 0, max_k = 0;
};

struct KeptAttentionStore {
  std::vector<std::shared_ptr<KeptCall>> calls;  // in call order
  size_t next = 0;                               // the next call a replay takes
};

std::shared_ptr<KeptAttentionStore> make_kept_attention_store() {
  return std::make_shared<KeptAttentionStore>();
}

namespace {

// Per thread: a block's first forward runs on the caller's thread, its recompute on autograd's
// device thread (a second rank's threads have their own).
thread_local KeptAttentionStore* current_store = nullptr;
thread_local bool current_replay = false;

torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                   const std::optional<torch::Tensor>& mask) {
  return at::scaled_dot_product_attention(q, k, v, mask);
}

// A plain tensor on `t`'s storage with its sizes and strides: the kept output becomes a custom
// Function's output in the replay, which must not be a view created without autograd.
torch::Tensor plain_alias(const torch::Tensor& t) {
  return torch::empty({0}, t.options()).set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
}

// The backend SDPA would choose for this call when q, k and v need gradients (as in the recompute
// whose attention a kept call stands in for): flash (CUDA or CPU) and cuDNN are kept, anything else
// is not. Attention with a mask, mixed dtypes, or under an autocast dtype other than q's (SDPA would
// cast) is not kept either.
at::SDPBackend keepable_backend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const std::optional<torch::Tensor>& mask) {
  if (mask.has_value() || q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return at::SDPBackend::error;
  if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type() || q.size(-1) % 8 != 0)
    return at::SDPBackend::error;
  const at::DeviceType type = q.device().type();
  if (type != at::kCUDA && type != at::kCPU) return at::SDPBackend::error;
  if (at::autocast::is_autocast_enabled(type) && at::autocast::get_autocast_dtype(type) != q.scalar_type())
    return at::SDPBackend::error;
  auto needing_grad = [](const torch::Tensor& t) { return t.detach().requires_grad_(true); };
  const auto choice = static_cast<at::SDPBackend>(
      at::_fused_sdp_choice(needing_grad(q), needing_grad(k), needing_grad(v), std::nullopt, 0.0, false,
                            std::nullopt, false));
  if (choice == at::SDPBackend::flash_attention) return choice;
  if (choice == at::SDPBackend::cudnn_attention && type == at::kCUDA) return choice;
  return at::SDPBackend::error;
}

using CudaAttentionResult = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, c10::SymInt,
                                       c10::SymInt, torch::Tensor, torch::Tensor, torch::Tensor>;

torch::Tensor record(KeptAttentionStore& store, const torch::Tensor& q, const torch::Tensor& k,
                     const torch::Tensor& v, const std::optional<torch::Tensor>& mask) {
  auto call = std::make_shared<KeptCall>();
  store.calls.push_back(call);
  // Recording belongs to a checkpointed block's first forward, where autograd is off; with it on,
  // the backend's output would carry no gradient: SDPA, not kept.
  if (torch::GradMode::is_enabled()) return sdpa(q, k, v, mask);
  call->backend = keepable_backend(q, k, v, mask);
  if (call->backend == at::SDPBackend::error) return sdpa(q, k, v, mask);
  call->cuda = q.is_cuda();
  call->q_sizes = q.sizes().vec();
  call->k_sizes = k.sizes().vec();
  call->v_sizes = v.sizes().vec();
  call->dtype = q.scalar_type();
  torch::Tensor out;
  if (!call->cuda) {
    std::tie(out, call->lse) = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, false);
  } else {
    // Flash and cuDNN return the same nine: out, lse, cum_seq_q, cum_seq_k, max_q, max_k, seed,
    // offset, debug mask.
    const CudaAttentionResult r =
        call->backend == at::SDPBackend::flash_attention
            ? at::_scaled_dot_product_flash_attention(q, k, v, 0.0, false, false)
            : at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, /*compute_log_sumexp=*/true);
    std::tie(out, call->lse, call->cum_q, call->cum_k, std::ignore, std::ignore, call->seed, call->offset,
             std::ignore) = r;
    call->max_q = std::get<4>(r).expect_int();
    call->max_k = std::get<5>(r).expect_int();
  }
  call->out = plain_alias(out);
  call->kept = true;
  return out;
}

struct KeptCallHolder : torch::CustomClassHolder {
  std::shared_ptr<KeptCall> call;
};

// The replayed attention: forward hands back the kept output, backward is the backend's backward
// on the recomputed q, k, v (what SDPA's own backward would run after a recomputed forward).
class KeptAttentionFunction : public torch::autograd::Function<KeptAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const c10::intrusive_ptr<KeptCallHolder>& holder,
                               const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(holder);
    torch::Tensor out = std::move(holder->call->out);  // the node keeps it now, as an output
    ctx->save_for_backward({q, k, v, out});
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<KeptCallHolder>(ctx->saved_data["call"].toCapsule());
    const KeptCall& call = *holder->call;
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& grad = grads[0];
    if (!grad.defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> g;
    if (!call.cuda) {
      g = at::_scaled_dot_product_flash_attention_for_cpu_backward(grad, saved[0], saved[1], saved[2], saved[3],
                                                                   call.lse, 0.0, false);
    } else if (call.backend == at::SDPBackend::flash_attention) {
      g = at::_scaled_dot_product_flash_attention_backward(grad, saved[0], saved[1], saved[2], saved[3], call.lse,
                                                           call.cum_q, call.cum_k, call.max_q, call.max_k, 0.0,
                                                           false, call.seed, call.offset);
    } else {
      g = at::_scaled_dot_product_cudnn_attention_backward(grad, saved[0], saved[1], saved[2], saved[3], call.lse,
                                                           call.seed, call.offset, torch::Tensor(), call.cum_q,
                                                           call.cum_k, call.max_q, call.max_k, 0.0, false);
    }
    return {torch::Tensor(), std::get<0>(g), std::get<1>(g), std::get<2>(g)};
  }
};

torch::Tensor replay(KeptAttentionStore& store, const torch::Tensor& q, const torch::Tensor& k,
                     const torch::Tensor& v, const std::optional<torch::Tensor>& mask) {
  if (store.next >= store.calls.size()) return sdpa(q, k, v, mask);
  std::shared_ptr<KeptCall> call = std::move(store.calls[store.next++]);
  // The recompute makes the same calls as the first forward; a call that was not kept, or one that
  // does not match what was kept, runs as usual.
  const bool same = call && call->kept && call->out.defined() && !mask.has_value() &&
                    q.sizes().vec() == call->q_sizes && k.sizes().vec() == call->k_sizes &&
                    v.sizes().vec() == call->v_sizes && q.scalar_type() == call->dtype &&
                    k.scalar_type() == call->dtype && v.scalar_type() == call->dtype && q.is_cuda() == call->cuda;
  if (!same) return sdpa(q, k, v, mask);
  auto holder = c10::make_intrusive<KeptCallHolder>();
  holder->call = std::move(call);
  return KeptAttentionFunction::apply(holder, q, k, v);
}

}  // namespace

KeptAttentionScope::KeptAttentionScope(KeptAttentionStore* store, bool replay)
    : previous_store_(current_store), previous_replay_(current_replay) {
  if (store == nullptr) return;
  current_store = store;
  current_replay = replay;
  if (replay) store->next = 0;
}

KeptAttentionScope::~KeptAttentionScope() {
  current_store = previous_store_;
  current_replay = previous_replay_;
}

torch::Tensor kept_or_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const std::optional<torch::Tensor>& mask) {
  if (current_store == nullptr) return sdpa(q, k, v, mask);
  return current_replay ? replay(*current_store, q, k, v, mask) : record(*current_store, q, k, v, mask);
}

}  // namespace tt
