# Finds every third-party dependency once and bundles the common ones into `teletron_deps`, an
# interface target all teletron libraries link, so that their compile flags match and they can
# share one precompiled LibTorch header.

# CUDA: decide before TorchConfig runs, because a CUDA build of torch looks for the toolkit.
include(CheckLanguage)
set(TELETRON_HAVE_CUDA OFF)
if(NOT TELETRON_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    # CMake 3.25 does not know nvcc 13's C++20 flags; the kernels need only C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    # TorchConfig would otherwise try to run a program on a GPU to pick architectures.
    if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
      set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(TELETRON_HAVE_CUDA ON)
  elseif(TELETRON_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TELETRON_CUDA=ON but no nvcc was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()
message(STATUS "teletron: CUDA kernels ${TELETRON_HAVE_CUDA}")

# LibTorch: ask the Python interpreter where pip put it unless CMAKE_PREFIX_PATH already knows.
if(NOT Torch_DIR)
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _tt_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
    RESULT_VARIABLE _tt_torch_rc)
  if(NOT _tt_torch_rc EQUAL 0)
    message(FATAL_ERROR "LibTorch not found: run `pip install torch==2.11.0` or set CMAKE_PREFIX_PATH")
  endif()
  list(APPEND CMAKE_PREFIX_PATH ${_tt_torch_prefix})
endif()

find_package(Torch REQUIRED)
find_package(Threads REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(FFMPEG REQUIRED IMPORTED_TARGET libavformat libavcodec libavutil libswscale)

# LibTorch ships fmt 12 headers that shadow the fmt spdlog was built against. A directory holding
# only a `fmt` link to the distro's headers goes first on the include path.
get_target_property(_tt_fmt_inc fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
list(GET _tt_fmt_inc 0 _tt_fmt_inc)
set(TELETRON_FMT_SHIM ${CMAKE_BINARY_DIR}/fmt_shim)
file(MAKE_DIRECTORY ${TELETRON_FMT_SHIM})
file(CREATE_LINK ${_tt_fmt_inc}/fmt ${TELETRON_FMT_SHIM}/fmt SYMBOLIC)

# yaml-cpp 0.7 (Debian 12) names its target `yaml-cpp`, 0.8 (Ubuntu 24.04) `yaml-cpp::yaml-cpp`.
if(TARGET yaml-cpp::yaml-cpp)
  set(TELETRON_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(TELETRON_YAML_TARGET yaml-cpp)
endif()

add_library(teletron_deps INTERFACE)
target_include_directories(teletron_deps SYSTEM BEFORE INTERFACE ${TELETRON_FMT_SHIM})
target_include_directories(teletron_deps INTERFACE ${PROJECT_SOURCE_DIR})
# libstdc++ first: the LibTorch wheel exports its own copy of some std::filesystem symbols
# (pytorch/pytorch#133437) whose remove_all crashes when it wins symbol resolution.
target_link_libraries(teletron_deps INTERFACE stdc++ ${TORCH_LIBRARIES} spdlog::spdlog fmt::fmt
                      ${TELETRON_YAML_TARGET} nlohmann_json::nlohmann_json Threads::Threads)
target_compile_options(teletron_deps INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
if(TELETRON_HAVE_CUDA)
  target_compile_definitions(teletron_deps INTERFACE TELETRON_WITH_CUDA=1)
endif()

# One precompiled LibTorch header, reused by every library and test.
add_library(teletron_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
target_link_libraries(teletron_pch PRIVATE teletron_deps)
if(TELETRON_PCH)
  target_precompile_headers(teletron_pch PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:${PROJECT_SOURCE_DIR}/cmake/pch.h>")
endif()

# TELETRON_UNITY: the target's C++ sources compiled in batches of 8 (their headers and templates
# once per batch). A source that cannot share a batch (a name in an anonymous namespace that another
# file of the library also defines, or headers included under different macros) is listed with
# SKIP_UNITY_BUILD_INCLUSION beside the library; sources with their own compile definitions are
# left out by CMake itself.
function(teletron_unity target)
  if(TELETRON_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()

function(teletron_use_pch target)
  if(TELETRON_PCH)
    target_precompile_headers(${target} REUSE_FROM teletron_pch)
  endif()
endfunction()
