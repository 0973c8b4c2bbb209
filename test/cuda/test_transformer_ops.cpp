// The Transformer block kernels (cuda/gated_residual.cu, rms_norm_rope.cu, gelu_tanh.cu), forward
// and backward, against their CPU references in cuda/ops.cpp computed from the same values: fp32
// and bf16, strided inputs as the model passes them, shapes past one grid's rows and one
// reduction chunk. The CPU references themselves are checked against autograd of the unfused
// composition in test/model/test_fused_ops.cpp.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>

#include <array>
#include <cmath>
#include <vector>

#include "cuda/ops.h"
#include "test/test_util.h"

namespace {

const torch::Device kCuda(torch::kCUDA);

// Largest excess of |got - want| over atol + rtol * |want|; <= 0 means within tolerance.
double excess(const torch::Tensor& got, const torch::Tensor& want, double atol, double rtol) {
  auto g = got.cpu().to(torch::kFloat64), w = want.cpu().to(torch::kFloat64);
  return ((g - w).abs() - (atol + rtol * w.abs())).max().item<double>();
}

double max_abs_diff(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.cpu().to(torch::kFloat64) - want.cpu().to(torch::kFloat64)).abs().max().item<double>();
}

double mean_abs_diff(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.cpu().to(torch::kFloat64) - want.cpu().to(torch::kFloat64)).abs().mean().item<double>();
}

// Every element within atol + rtol * |want|, and the mean |diff| at most `mean`.
struct Tolerance {
  double atol, rtol, mean;
};
// fp32: a few ulps. bf16: one rounding of fp32 math on both sides, which may land one bf16 ulp
// (at most 2^-7 relative) apart when the fp32 values straddle a rounding boundary; the mean bound
// catches systematic errors a per-element ulp bound lets through.
Tolerance tolerance_for(torch::Dtype dtype) {
  return dtype == torch::kFloat32 ? Tolerance{1e-5, 1e-5, 1e-6} : Tolerance{1e-2, 1.0 / 128, 1e-3};
}

void check_close(const char* what, const torch::Tensor& got, const torch::Tensor& want, Tolerance t) {
  REQUIRE(got.sizes() == want.sizes());
  CHECK(got.scalar_type() == want.scalar_type());
  const double e = excess(got, want, t.atol, t.rtol), mean = mean_abs_diff(got, want);
  INFO(what << ": max |diff| " << max_abs_diff(got, want) << ", excess over tolerance " << e
            << ", mean |diff| " << mean);
  CHECK(e <= 0);
  CHECK(mean <= t.mean);
}

}  // namespace

TEST_CASE("gated residual kernels equal the CPU reference", "[gpu][fused]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(11);
  // (B, N, C): channels not a multiple of 32, one partial chunk; many chunks; rows past 65535.
  const std::vector<std::vector<int64_t>> shapes = {{2, 37, 96}, {3, 1000, 130}, {2, 40000, 8}, {1, 1, 1}};
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto& shape : shapes) {
      INFO(dtype << " " << at::IntArrayRef(shape));
      auto x = torch::randn(shape).to(dtype);
      auto y = torch::randn(shape).to(dtype);
      auto gate = torch::randn({shape[0], shape[2]}).to(dtype);
      auto grad = torch::randn(shape).to(dtype);
      const Tolerance t = tolerance_for(dtype);
      auto out = tt::gated_residual_forward(x.to(kCuda), y.to(kCuda), gate.to(kCuda));
      check_close("out", out, tt::gated_residual_forward_reference(x, y, gate), t);
      auto [dy, dgate] = tt::gated_residual_backward(grad.to(kCuda), y.to(kCuda), gate.to(kCuda));
      auto [dy_ref, dgate_ref] = tt::gated_residual_backward_reference(grad, y, gate);
      check_close("dy", dy, dy_ref, t);
      // dgate sums N products in fp32 in another order: fp32 within 1e-5 of the sum's scale (~sqrt(N));
      // bf16 rounds |dgate| ~ sqrt(N) (a one-ulp flip is 1.0 at N = 40000), so no mean bound there.
      const double scale = std::sqrt(static_cast<double>(shape[1]));
      check_close("dgate", dgate, dgate_ref,
                  dtype == torch::kFloat32 ? Tolerance{1e-5 * scale, 1e-5, 1e-5 * scale}
                                           : Tolerance{1e-2, 1.0 / 128, 1e30});
    }
  }
}

TEST_CASE("gated residual backward on CUDA is deterministic", "[gpu][fused]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(12);
  auto y = torch::randn({2, 5000, 64}, kCuda);
  auto gate = torch::randn({2, 64}, kCuda);
  auto grad = torch::randn({2, 5000, 64}, kCuda);
  auto first = tt::gated_residual_backward(grad, y, gate).second;
  auto second = tt::gated_residual_backward(grad, y, gate).second;
  CHECK(torch::equal(first, second));
}

namespace {

// q of a fused QKV projection as the model slices it: qkv (B, N, 3, H, D) -> (B, H, N, D), a strided
// view. Made on each device from the same values (a .to() of the view would copy it densely).
torch::Tensor q_view(const torch::Tensor& qkv) {
  return qkv.select(2, 0).permute({0, 2, 1, 3});
}

// (tokens, D/2, 2) fp32 (cos, sin) of random angles.
torch::Tensor random_rope(int64_t tokens, int64_t d) {
  auto angles = torch::rand({tokens, d / 2}) * 6.3;
  return torch::stack({torch::cos(angles), torch::sin(angles)}, -1).contiguous();
}

struct NormRopeCase {
  int64_t b, h, n, d, rope_tokens;
};

}  // namespace

TEST_CASE("QK RMSNorm + RoPE kernels equal the CPU reference", "[gpu][fused]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(13);
  // D 16 (lanes idle), 128 (two pairs a lane), 256 (the most); no RoPE, all tokens, a prefix
  // (the single blocks' video tokens); 12000 rows take the backward's grid-stride loop.
  const std::vector<NormRopeCase> cases = {{2, 3, 7, 16, 0},        {2, 3, 7, 16, 7},  {1, 4, 33, 128, 20},
                                           {2, 4, 1500, 128, 1000}, {1, 2, 9, 256, 5}, {1, 1, 1, 2, 1}};
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const NormRopeCase& k : cases) {
      INFO(dtype << " B " << k.b << " H " << k.h << " N " << k.n << " D " << k.d << " rope_tokens "
                 << k.rope_tokens);
      auto qkv = (torch::randn({k.b, k.n, 3, k.h, k.d}) * 2 + 0.3).to(dtype);
      auto x = q_view(qkv);
      auto weight = 0.5 + torch::rand({k.d});  // fp32, as the parameter
      auto rope = k.rope_tokens > 0 ? random_rope(k.rope_tokens, k.d) : torch::Tensor();
      auto grad = torch::randn({k.b, k.h, k.n, k.d}).to(dtype);
      const double eps = 1e-6;
      auto x_gpu = q_view(qkv.to(kCuda));  // the kernel reads the view in place
      REQUIRE(x_gpu.strides() == x.strides());
      auto rope_gpu = rope.defined() ? rope.to(kCuda) : torch::Tensor();
      auto [out, rstd] = tt::rms_norm_rope_forward(x_gpu, weight.to(kCuda), rope_gpu, k.rope_tokens, eps);
      auto [out_ref, rstd_ref] = tt::rms_norm_rope_forward_reference(x, weight, rope, k.rope_tokens, eps);
      // Stored token-major, (B, N, H, D) in memory, as the QKV projection's views are.
      CHECK(out.permute({0, 2, 1, 3}).is_contiguous());
      // bf16: a one-ulp flip of the rounded x̂w (|x̂w| < 8: ulp <= 2^-5) survives the rotation
      // even where the rotated value is small, hence the absolute floor.
      check_close("out", out, out_ref,
                  dtype == torch::kFloat32 ? Tolerance{1e-5, 1e-5, 1e-6} : Tolerance{0.04, 1.0 / 128, 2e-3});
      check_close("rstd", rstd, rstd_ref, Tolerance{0, 2e-6, 1e-6});  // rsqrtf: 2 ulps, plus the sum's order
      auto [dx, dweight] =
          tt::rms_norm_rope_backward(grad.to(kCuda), x_gpu, weight.to(kCuda), rstd, rope_gpu, k.rope_tokens);
      auto [dx_ref, dweight_ref] =
          tt::rms_norm_rope_backward_reference(grad, x, weight, rstd_ref, rope, k.rope_tokens);
      const Tolerance t = dtype == torch::kFloat32 ? Tolerance{1e-4, 1e-4, 1e-5} : tolerance_for(dtype);
      check_close("dx", dx, dx_ref, t);
      CHECK(dx.permute({0, 2, 1, 3}).is_contiguous());
      // A token-major gradient (attention's, for token-major q) read in place: the same dx bit for bit.
      const auto grad_token_major = grad.to(kCuda).permute({0, 2, 1, 3}).contiguous().permute({0, 2, 1, 3});
      if (k.h > 1 && k.n > 1) REQUIRE(!grad_token_major.is_contiguous());  // (one head or token: the same)
      auto [dx_strided, dweight_strided] = tt::rms_norm_rope_backward(
          grad_token_major, x_gpu, weight.to(kCuda), rstd, rope_gpu, k.rope_tokens);
      CHECK(torch::equal(dx_strided, dx));
      CHECK(torch::equal(dweight_strided, dweight));
      // dweight: a fp32 sum over B * H * N rows in both (dtype only rounds the inputs).
      const double rows = static_cast<double>(k.b * k.h * k.n);
      check_close("dweight", dweight, dweight_ref,
                  Tolerance{1e-5 * std::sqrt(rows), 1e-4, 1e-5 * std::sqrt(rows)});
    }
  }
}

TEST_CASE("GELU-tanh kernels equal the CPU reference and ATen's CUDA gelu", "[gpu][fused]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(14);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    // A column slice of a wider matrix (the single blocks' MLP half of linear1), rows past 65535,
    // a transposed tensor (copied by the entry), and rows whose length allows every vector width
    // between them (bf16: 8, 1, 2, 4 elements; fp32: 4, 1, 2, 4).
    auto wide = (torch::randn({2, 40000, 40}) * 3).to(dtype);
    auto small = (torch::randn({5, 7}) * 3).to(dtype);
    auto square = (torch::randn({6, 9}) * 3).to(dtype);
    auto rows12 = (torch::randn({3, 100, 12}) * 3).to(dtype);  // 12 per row: vectors of 4 elements
    // (CPU view, the same view of the GPU copy): a .to() of a view would copy it densely.
    const std::vector<std::pair<torch::Tensor, torch::Tensor>> inputs = {
        {wide.slice(2, 16), wide.to(kCuda).slice(2, 16)},
        {small, small.to(kCuda)},
        {square.t(), square.to(kCuda).t()},
        {rows12, rows12.to(kCuda)}};
    for (const auto& [x, x_gpu] : inputs) {
      INFO(dtype << " " << x.sizes() << " strides " << x.strides());
      REQUIRE(x_gpu.strides() == x.strides());
      auto grad = torch::randn(x.sizes()).to(dtype);
      auto y = tt::gelu_tanh_forward(x_gpu);
      const Tolerance t = dtype == torch::kFloat32 ? Tolerance{1e-6, 1e-5, 1e-6} : tolerance_for(dtype);
      check_close("y", y, tt::gelu_tanh_forward_reference(x), t);
      check_close("y vs ATen", y, torch::gelu(x_gpu, "tanh"), t);
      auto dx = tt::gelu_tanh_backward(grad.to(kCuda), x_gpu);
      const auto dx_reference = tt::gelu_tanh_backward_reference(grad, x);
      if (dtype == torch::kFloat32) {
        // dx's fp32 formula loses digits where tanh is near +-1 (1 - tanh^2 cancels, then is
        // multiplied by x (1 + 3 kappa x^2)): there the kernel and the fp32 reference both miss the
        // exact value by more than a few ulps of dx. Judged against fp64, the kernel may be off as
        // far as the fp32 reference is (twice, for a tanhf another way round), not further.
        const auto exact = tt::gelu_tanh_backward_reference(grad.to(torch::kFloat64), x.to(torch::kFloat64));
        const double kernel_error = max_abs_diff(dx, exact),
                     reference_error = max_abs_diff(dx_reference, exact);
        const double kernel_mean = mean_abs_diff(dx, exact),
                     reference_mean = mean_abs_diff(dx_reference, exact);
        INFO("dx against fp64: kernel max |diff| " << kernel_error << " (fp32 reference " << reference_error
                                                   << "), mean " << kernel_mean << " (" << reference_mean
                                                   << ")");
        CHECK(kernel_error <= 2 * reference_error + 1e-7);
        CHECK(kernel_mean <= 2 * reference_mean + 1e-9);
      } else {
        check_close("dx", dx, dx_reference, t);
      }
      // The gradient as a column slice of a wider one (GeluLinear's backward passes the MLP's part
      // of its input's gradient), read in place: the same values as from its dense copy.
      auto sizes = x.sizes().vec();
      sizes.back() += 16;
      const auto grad_slice = torch::randn(sizes).to(dtype).to(kCuda).slice(-1, 16);
      REQUIRE(!grad_slice.is_contiguous());
      const auto dense = tt::gelu_tanh_backward(grad_slice.contiguous(), x_gpu);
      CHECK(torch::equal(tt::gelu_tanh_backward(grad_slice, x_gpu), dense));
      // Written into a column slice of a wider buffer (the single blocks' linear1 gradient): the
      // same values there, the columns beside it untouched.
      auto sizes_out = x.sizes().vec();
      sizes_out.back() += 24;
      const auto buffer = torch::full(sizes_out, 7.0, torch::TensorOptions().dtype(dtype).device(kCuda));
      const auto out = buffer.slice(-1, 24);
      const auto returned = tt::gelu_tanh_backward(grad_slice, x_gpu, out);
      CHECK(returned.data_ptr() == out.data_ptr());
      CHECK(torch::equal(out, dense));
      CHECK(torch::equal(buffer.slice(-1, 0, 24), torch::full_like(buffer.slice(-1, 0, 24), 7.0)));
      // With the GELU's value from the same pass (GeluLinear's backward): both as the kernels alone
      // give them, bit for bit.
      const auto [dx_both, value] = tt::gelu_tanh_backward_and_value(grad_slice, x_gpu);
      CHECK(torch::equal(dx_both, dense));
      CHECK(torch::equal(value, y));
      CHECK(value.is_contiguous());
    }
  }
}

TEST_CASE("weight_bias_grad: one cuBLASLt GEMM gives grad^T x and grad's column sums in fp32",
          "[gpu][fused]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(15);
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    // Dense operands; x a column slice of a wider matrix and the result a column block (offset by 3
    // floats: 4-byte aligned) of a wider one, as the single blocks' linear2 gives them; rows past a
    // few tiles; a bias-free call.
    const int64_t tokens = 1500, out = 48, in = 72;
    const auto grad = torch::randn({tokens, out}).to(dtype).to(kCuda);
    const auto x_wide = torch::randn({tokens, in + 8}).to(dtype).to(kCuda);
    for (const bool strided : {false, true}) {
      for (const bool with_bias : {true, false}) {
        INFO(dtype << (strided ? ", strided x and result" : ", dense")
                   << (with_bias ? ", bias" : ", no bias"));
        const auto x = strided ? x_wide.slice(1, 8) : x_wide.slice(1, 8).contiguous();
        auto wide = torch::full({out, in + 5}, 7.0f, torch::TensorOptions().device(kCuda));
        const auto weight_grad = strided ? wide.slice(1, 3, 3 + in) : torch::empty({out, in}, wide.options());
        auto bias_grad = with_bias ? torch::full({out}, 7.0f, wide.options()) : torch::Tensor();
        REQUIRE(tt::weight_bias_grad(grad, x, weight_grad, bias_grad));
        // fp32 products of half-precision values are exact; only the order of the fp32 sums differs.
        const auto want_weight = grad.to(torch::kFloat64).t().mm(x.to(torch::kFloat64));
        CHECK(excess(weight_grad, want_weight, 1e-4, 1e-5) <= 0);
        if (with_bias) CHECK(excess(bias_grad, grad.to(torch::kFloat64).sum(0), 1e-4, 1e-5) <= 0);
        if (strided) {  // the columns beside the block untouched
          CHECK(torch::equal(wide.slice(1, 0, 3), torch::full({out, 3}, 7.0f, wide.options())));
          CHECK(torch::equal(wide.slice(1, 3 + in), torch::full({out, 2}, 7.0f, wide.options())));
        }
      }
    }
  }
}

TEST_CASE("weight_bias_grad takes only CUDA half-precision operands with an fp32 result", "[fused]") {
  // Callers fall back to ATen's GEMM and sum on false; nothing is written then.
  auto weight_grad = torch::full({4, 6}, 7.0f);
  CHECK_FALSE(tt::weight_bias_grad(torch::randn({10, 4}).to(torch::kBFloat16),
                                   torch::randn({10, 6}).to(torch::kBFloat16), weight_grad, torch::Tensor()));
  CHECK(torch::equal(weight_grad, torch::full({4, 6}, 7.0f)));
  if (!torch::cuda::is_available()) return;
  const auto options = torch::TensorOptions().device(kCuda);
  const auto g32 = torch::randn({10, 4}, options), x32 = torch::randn({10, 6}, options);
  auto wg = torch::empty({4, 6}, options);
  CHECK_FALSE(tt::weight_bias_grad(g32, x32, wg, torch::Tensor()));  // fp32 operands
  CHECK_FALSE(tt::weight_bias_grad(g32.to(torch::kBFloat16), x32.to(torch::kHalf), wg, torch::Tensor()));
  CHECK_FALSE(tt::weight_bias_grad(g32.to(torch::kBFloat16), x32.to(torch::kBFloat16),
                                   wg.to(torch::kBFloat16),
                                   torch::Tensor()));  // a bf16 result
  CHECK_FALSE(tt::weight_bias_grad(g32.to(torch::kBFloat16), x32.to(torch::kBFloat16).t().contiguous().t(),
                                   wg,
                                   torch::Tensor()));  // x column-major
}

TEST_CASE("adaLN modulation kernels equal the CPU reference", "[gpu][fused]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(16);
  // The 1b and 13b widths (1536, 3072), a width that leaves threads idle (200), one channel, rows
  // past a backward chunk and over several samples.
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1000, 1536}, {2, 7, 3072}, {3, 70, 200}, {2, 5, 1}};
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto& [b, n, c] : shapes) {
      INFO(dtype << " B " << b << " N " << n << " C " << c);
      const auto x = (torch::randn({b, n, c}) * 2 + 0.3).to(dtype);
      const auto shift = (torch::randn({b, c}) * 0.5).to(dtype);
      const auto scale = (torch::randn({b, c}) * 0.5).to(dtype);
      const auto grad = torch::randn({b, n, c}).to(dtype);
      auto [m, mean, rstd] =
          tt::layer_norm_modulate_forward(x.to(kCuda), shift.to(kCuda), scale.to(kCuda), 1e-6);
      // The reference is the composition on the same device (ATen's CUDA LayerNorm and addcmul).
      auto [m_ref, mean_ref, rstd_ref] =
          tt::layer_norm_modulate_forward_reference(x.to(kCuda), shift.to(kCuda), scale.to(kCuda), 1e-6);
      REQUIRE(mean.sizes() == mean_ref.sizes());
      // bf16: a one-ulp flip of the rounded x̂ (|x̂| < 8) times 1 + scale survives where shift cancels
      // the product, hence the absolute floor.
      check_close("m", m, m_ref,
                  dtype == torch::kFloat32 ? Tolerance{1e-4, 1e-4, 1e-5} : Tolerance{0.06, 1.0 / 128, 2e-3});
      check_close("mean", mean, mean_ref, Tolerance{1e-5, 1e-5, 1e-6});
      check_close("rstd", rstd, rstd_ref, Tolerance{1e-5, 1e-4, 1e-5});
      // Backward from the same statistics on both sides (the kernel's).
      auto [dx, dshift, dscale] =
          tt::layer_norm_modulate_backward(grad.to(kCuda), x.to(kCuda), scale.to(kCuda), mean, rstd);
      auto [dx_ref, dshift_ref, dscale_ref] = tt::layer_norm_modulate_backward_reference(
          grad.to(kCuda), x.to(kCuda), scale.to(kCuda), mean, rstd);
      const Tolerance row =
          dtype == torch::kFloat32 ? Tolerance{1e-4, 1e-4, 1e-5} : Tolerance{1e-2, 1.0 / 128, 1e-3};
      const Tolerance column =
          dtype == torch::kFloat32 ? Tolerance{1e-3, 1e-4, 1e-4} : Tolerance{1e-2, 1.0 / 128, 1e-3};
      check_close("dx", dx, dx_ref, row);
      check_close("dshift", dshift, dshift_ref, column);
      check_close("dscale", dscale, dscale_ref, column);
    }
  }
}

TEST_CASE("adaLN modulation reference backward gives autograd's gradients of LayerNorm then addcmul",
          "[fused]") {
  torch::manual_seed(17);
  const auto x = (torch::randn({2, 9, 24}) * 2 + 0.3).to(torch::kFloat64).requires_grad_(true);
  const auto shift = torch::randn({2, 24}, torch::kFloat64).requires_grad_(true);
  const auto scale = torch::randn({2, 24}, torch::kFloat64).requires_grad_(true);
  const auto grad = torch::randn({2, 9, 24}, torch::kFloat64);
  auto [m, mean, rstd] = tt::layer_norm_modulate_forward_reference(x, shift, scale, 1e-6);
  const auto composed =
      torch::addcmul(shift.unsqueeze(1), torch::layer_norm(x, {24}, {}, {}, 1e-6), 1 + scale.unsqueeze(1));
  CHECK(torch::allclose(m, composed, 1e-12, 1e-12));
  const auto autograd = torch::autograd::grad({composed}, {x, shift, scale}, {grad});
  auto [dx, dshift, dscale] =
      tt::layer_norm_modulate_backward_reference(grad, x.detach(), scale.detach(), mean, rstd);
  CHECK(torch::allclose(dx, autograd[0], 1e-9, 1e-9));
  CHECK(torch::allclose(dshift, autograd[1], 1e-9, 1e-9));
  CHECK(torch::allclose(dscale, autograd[2], 1e-9, 1e-9));
}
