# TELETRON_SANITIZE and TELETRON_FUZZ: compile and link teletron's own code (every library, test and
# fuzz target; not LibTorch or the distro libraries, which stay as shipped) with clang's sanitizers.
# Runtime options and the suppressions for third-party code live in test/sanitizers/.
if(TELETRON_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TELETRON_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++-14")
  endif()
  if(TELETRON_SANITIZE STREQUAL "")
    set(TELETRON_SANITIZE "address,undefined" CACHE STRING "" FORCE)
  endif()
endif()

if(NOT TELETRON_SANITIZE STREQUAL "")
  # The sanitizer build is a CPU build (TELETRON_CUDA=OFF), but the pip LibTorch is a CUDA build:
  # where a CUDA toolkit is installed, TorchConfig would try_run a GPU probe (and fail on a
  # machine without a GPU) unless an architecture list is given. Also on every re-configure.
  if(TELETRON_CUDA STREQUAL "OFF" AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
  endif()
  # -O1 keeps ASan's reports readable and the build quick; line tables give symbolised stacks
  # without full debug info. UBSan stays recoverable so that its suppression file applies;
  # UBSAN_OPTIONS=halt_on_error=1 (test/sanitizers/env.sh) makes every report fatal.
  set(_tt_san_flags -fsanitize=${TELETRON_SANITIZE} -fno-omit-frame-pointer -O1 -gline-tables-only)
  if(TELETRON_FUZZ)
    # Coverage feedback for libFuzzer in every library; the fuzz executables add -fsanitize=fuzzer.
    list(APPEND _tt_san_flags -fsanitize=fuzzer-no-link)
  endif()
  foreach(_flag IN LISTS _tt_san_flags)
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:${_flag}>)
  endforeach()
  add_link_options(-fsanitize=${TELETRON_SANITIZE})
  message(STATUS "teletron: sanitizers ${TELETRON_SANITIZE}")
endif()
if(TELETRON_FUZZ)
  message(STATUS "teletron: libFuzzer targets ON (test/fuzz)")
endif()
