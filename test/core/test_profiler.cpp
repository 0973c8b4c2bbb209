// --profile's parts (core/profiler): the FIRST:COUNT window and the busy share of a Chrome trace
// (union of kernel intervals: overlapping kernels count once, the wall is every event's span).
#include "core/profiler.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include <sstream>

#include "core/errors.h"
#include "test/test_util.h"

using Catch::Matchers::WithinAbs;

TEST_CASE("the profile window is FIRST:COUNT; anything else is TT_ERR_CONFIG", "[profile]") {
  const tt::ProfileWindow window = tt::parse_profile_window("20:5", "--profile");
  CHECK(window.first == 20);
  CHECK(window.count == 5);
  CHECK(window.last() == 24);
  CHECK(window.active());
  CHECK_FALSE(tt::ProfileWindow{}.active());
  CHECK_FALSE(window.memory);
  const tt::ProfileWindow with_memory = tt::parse_profile_window("3:2:memory", "--profile");
  CHECK(with_memory.first == 3);
  CHECK(with_memory.count == 2);
  CHECK(with_memory.memory);
  CHECK_FALSE(with_memory.shapes);
  const tt::ProfileWindow both = tt::parse_profile_window("3:2:shapes:memory", "--profile");
  CHECK((both.memory && both.shapes && both.count == 2));
  for (const char* bad : {"20", "20:", ":5", "0:5", "20:0", "a:5", "20:5x", "-1:3", "3:2:", "3:2:mem",
                          "3::memory", "3:2:memory:memory", "3:2:shapes:"}) {
    INFO(bad);
    CHECK(tt::test::expect_error([&] { tt::parse_profile_window(bad, "--profile"); }).code() ==
          tt::ErrorCode::kConfig);
  }
}

TEST_CASE("a trace's GPU busy share is the union of its kernel intervals over its span", "[profile]") {
  // CPU ops span 0..1000 µs; kernels at 100-300 and 200-400 (two streams, overlapping: 300 µs
  // together) and 600-700; a zero-length kernel and a non-X event count for nothing.
  const nlohmann::json trace = {
      {"traceEvents",
       {{{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"ts", 0}, {"dur", 1000}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "a"}, {"ts", 100}, {"dur", 200}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "b"}, {"ts", 200}, {"dur", 200}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "c"}, {"ts", 600.5}, {"dur", 100}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "d"}, {"ts", 650}, {"dur", 0}},
        {{"ph", "i"}, {"cat", "kernel"}, {"name", "marker"}, {"ts", 5000}},
        {{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", "copy"}, {"ts", 450}, {"dur", 100}}}}};
  const tt::TraceBusy busy = tt::trace_busy(trace);
  CHECK_THAT(busy.wall_s, WithinAbs(1000e-6, 1e-12));
  CHECK_THAT(busy.kernel_s, WithinAbs(400e-6, 1e-12));
  CHECK(busy.kernels == 4);
  CHECK_THAT(busy.share(), WithinAbs(0.4, 1e-9));
  CHECK(tt::trace_busy(nlohmann::json::object()).share() == 0.0);
  // Kinds: summed durations (overlap counts twice), the names here are "a", "b", "c", "d": other.
  CHECK_THAT(busy.kind_s.at("other"), WithinAbs(500e-6, 1e-12));
  CHECK(busy.kind_s.size() == 1);
  CHECK(busy.kinds_text() == "other 100 %");
  CHECK(tt::TraceBusy{}.kinds_text().empty());
}

TEST_CASE("kernels are sorted into kinds by name, and a trace says where its kernel time went", "[profile]") {
  // Names as Kineto writes them for LibTorch's and cuBLAS/cuDNN's kernels on the H200.
  CHECK(
      tt::kernel_kind("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1") ==
      "attention");
  CHECK(tt::kernel_kind(
            "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>") ==
        "attention");
  CHECK(tt::kernel_kind("fmha_cutlassB_bf16_aligned_64x64_k128_sm80") == "attention");
  CHECK(tt::kernel_kind("nvjet_tst_192x192_64x3_2x1_v_bz_coopB_TNT") == "GEMM");
  CHECK(tt::kernel_kind("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1") ==
        "GEMM");
  CHECK(tt::kernel_kind(
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>") ==
        "norm");
  CHECK(
      tt::kernel_kind("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>") ==
      "elementwise");
  CHECK(tt::kernel_kind(
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>") ==
        "optimizer");
  CHECK(tt::kernel_kind("void tt::cuda::gated_residual_kernel<__nv_bfloat16>(...)") == "teletron");
  CHECK(tt::kernel_kind("sm90_xmma_fprop_implicit_gemm_indexed_bf16bf16_bf16f32_f32_nhwckrsc_nhwc") ==
        "GEMM");
  CHECK(tt::kernel_kind("cudnn::conv3d_fprop_kernel") == "convolution");
  CHECK(tt::kernel_kind("mystery") == "other");
  const nlohmann::json trace = {
      {"traceEvents",
       {{{"ph", "X"}, {"cat", "kernel"}, {"name", "fmha_cutlassF_bf16"}, {"ts", 0}, {"dur", 600}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "nvjet_tst_128x256"}, {"ts", 600}, {"dur", 300}},
        {{"ph", "X"},
         {"cat", "kernel"},
         {"name", "vectorized_elementwise_kernel"},
         {"ts", 900},
         {"dur", 100}}}}};
  const tt::TraceBusy busy = tt::trace_busy(trace);
  CHECK(busy.kinds_text() == "attention 60 %, GEMM 30 %, elementwise 10 %");
}

TEST_CASE("a trace's kernels summed by name, the longest first", "[profile]") {
  const nlohmann::json trace = {
      {"traceEvents",
       {{{"ph", "X"}, {"cat", "kernel"}, {"name", "nvjet_a"}, {"ts", 0}, {"dur", 100}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "elementwise_b"}, {"ts", 100}, {"dur", 30}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "nvjet_a"}, {"ts", 200}, {"dur", 50}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "elementwise_b"}, {"ts", 300}, {"dur", 30}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "elementwise_b"}, {"ts", 400}, {"dur", 30}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "flash_c"}, {"ts", 500}, {"dur", 10}},
        {{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"ts", 0}, {"dur", 1000}}}}};
  const std::vector<tt::KernelTotal> all = tt::kernel_totals(trace, 10);
  REQUIRE(all.size() == 3);  // the host's operator is not a kernel
  CHECK(all[0].name == "nvjet_a");
  CHECK(all[0].kind == "GEMM");
  CHECK(all[0].count == 2);
  CHECK_THAT(all[0].seconds, WithinAbs(150e-6, 1e-12));
  CHECK(all[1].name == "elementwise_b");
  CHECK(all[1].count == 3);
  CHECK_THAT(all[1].seconds, WithinAbs(90e-6, 1e-12));
  CHECK(all[2].kind == "attention");
  CHECK(tt::kernel_totals(trace, 1).size() == 1);
  CHECK(tt::kernel_totals(nlohmann::json::object(), 5).empty());
}

TEST_CASE("a trace's allocator events give each device's first and highest allocated bytes", "[profile]") {
  auto memory = [](double ts, int64_t total, int64_t type, int64_t id) {
    return nlohmann::json{{"ph", "i"},
                          {"cat", "cpu_instant_event"},
                          {"name", "[memory]"},
                          {"ts", ts},
                          {"args", {{"Total Allocated", total}, {"Device Type", type}, {"Device Id", id}}}};
  };
  const nlohmann::json trace = {
      {"traceEvents",
       {{{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"ts", 0}, {"dur", 10}},
        memory(1, 100, 1, 0),
        memory(2, 64, 0, -1),
        memory(3, 900, 1, 0),
        memory(4, 300, 1, 0),
        memory(5, 32, 0, -1),
        memory(6, 5000, 1, 1),
        {{"ph", "i"}, {"name", "[memory]"}, {"ts", 7}},
        {{"ph", "i"}, {"name", "[memory]"}, {"ts", 8}, {"args", {{"Total Allocated", "lots"}}}},
        {{"ph", "i"},
         {"name", "[memory]"},
         {"ts", 9},
         {"args", {{"Total Allocated", 7}, {"Device Type", "gpu"}}}}}}};
  const std::map<std::string, tt::TraceMemory> m = tt::trace_memory(trace);
  REQUIRE(m.size() == 3);
  CHECK(m.at("cuda:0").events == 3);
  CHECK(m.at("cuda:0").first_bytes == 100);
  CHECK(m.at("cuda:0").peak_bytes == 900);
  CHECK(m.at("cuda:0").peak_above_first() == 800);
  CHECK(m.at("cpu").events == 2);
  CHECK(m.at("cpu").peak_bytes == 64);
  CHECK(m.at("cuda:1").peak_above_first() == 0);
  CHECK(tt::trace_memory(nlohmann::json::object()).empty());
}

TEST_CASE("the time split of a trace: kernel time per pass by kind, achieved rates, the longest kernels",
          "[profile]") {
  // Two passes: per pass 300 µs of GEMM, 100 µs of attention, 100 µs of elementwise, over 1000 µs.
  const nlohmann::json trace = {
      {"traceEvents",
       {{{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"ts", 0}, {"dur", 2000}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "nvjet_a"}, {"ts", 0}, {"dur", 300}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "flash_fwd"}, {"ts", 300}, {"dur", 100}},
        {{"ph", "X"},
         {"cat", "kernel"},
         {"name", "vectorized_elementwise_kernel"},
         {"ts", 400},
         {"dur", 100}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "nvjet_a"}, {"ts", 1000}, {"dur", 300}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "flash_fwd"}, {"ts", 1300}, {"dur", 100}},
        {{"ph", "X"},
         {"cat", "kernel"},
         {"name", "vectorized_elementwise_kernel"},
         {"ts", 1400},
         {"dur", 100}}}}};
  std::ostringstream text;
  // 3e11 FLOP of GEMM per pass in 300 µs: 1000 TFLOP/s; the attention group's kinds are absent
  // from the convolution group, which names a kind the trace lacks and gives no rate.
  const nlohmann::json split = tt::write_time_split(text, trace, "t.json", 2, "passes",
                                                    {{{"GEMM"}, 3e11, "the GEMMs"},
                                                     {{"attention", "elementwise"}, 4e10, "both"},
                                                     {{"convolution"}, 1e9, "none"}});
  INFO(text.str());
  CHECK_THAT(split["busy_share"].get<double>(), WithinAbs(0.5, 1e-9));  // 1000 of 2000 µs
  CHECK_THAT(split["wall_ms_per_pass"].get<double>(), WithinAbs(1.0, 1e-9));
  CHECK_THAT(split["kernel_ms_by_kind"]["GEMM"].get<double>(), WithinAbs(0.3, 1e-9));
  CHECK_THAT(split["kernel_ms_by_kind"]["attention"].get<double>(), WithinAbs(0.1, 1e-9));
  REQUIRE(split["achieved_tflops"].size() == 2);
  CHECK_THAT(split["achieved_tflops"][0]["tflops"].get<double>(), WithinAbs(1000.0, 1e-6));
  CHECK_THAT(split["achieved_tflops"][1]["tflops"].get<double>(), WithinAbs(200.0, 1e-6));  // 4e10 in 200 µs
  CHECK(split["top_kernels"][0]["name"] == "nvjet_a");
  CHECK_THAT(split["top_kernels"][0]["launches"].get<double>(), WithinAbs(1.0, 1e-12));
  CHECK_THAT(text.str(), Catch::Matchers::ContainsSubstring("| GEMM | 0.3 | 60 % |"));
  CHECK_THAT(text.str(),
             Catch::Matchers::ContainsSubstring("achieved by attention + elementwise kernels: 200 TFLOP/s"));
  std::ostringstream none;
  CHECK(tt::write_time_split(none, nlohmann::json::object(), "c.json", 3, "passes", {})["kernels_per_pass"] ==
        0);
  CHECK_THAT(none.str(), Catch::Matchers::ContainsSubstring("no GPU kernels on this device"));
}
