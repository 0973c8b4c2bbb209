// Names, exit codes and default hints of the TT_ERR_* codes (the README's table mirrors this).
#include "core/errors.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>

namespace tt {
namespace {

struct ErrorInfo {
  const char* name;
  int exit_code;
  const char* hint;
};

const ErrorInfo kErrorInfo[kErrorCodeCount] = {
    {"TT_ERR_CONFIG", 2, "fix the key named above; `teletron config FILE` prints every key with its default"},
    {"TT_ERR_DATA", 3, "check the manifest row and file named above; see README.md for the expected tensors"},
    {"TT_ERR_DECODE", 4, "re-encode the file (e.g. ffmpeg -i in.mp4 -c:v libx264 out.mp4) or drop it from the manifest"},
    {"TT_ERR_MEMORY", 5, "lower batch_size and raise gradient_accumulation to keep the samples per step, use a smaller bucket (data.buckets), or set model.activation_checkpointing: true"},
    {"TT_ERR_GRAPH", 6, "set cuda_graph.enabled: false to train without CUDA graphs (or cuda_graph.scope: blocks to capture only the Transformer blocks), and report it with the command and config"},
    {"TT_ERR_SYNC", 7, "rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel; report it if it persists"},
    {"TT_ERR_NAN", 8, "lower optimizer.lr and keep gradient clipping on (optimizer.max_grad_norm > 0)"},
    {"TT_ERR_CHECKPOINT", 9, "pass --resume with a complete checkpoint folder, or remove the damaged one"},
    {"TT_ERR_IO", 10, "check the path exists, is writable and the disk has free space"},
    {"TT_ERR_INTERNAL", 11, "this is a teletron bug: please report it with the command and config (TELETRON_BACKTRACE=1 TORCH_SHOW_CPP_STACKTRACES=1 adds LibTorch's stack)"},
};

const ErrorInfo& info(ErrorCode code) { return kErrorInfo[static_cast<int>(code)]; }

}  // namespace

const char* error_name(ErrorCode code) { return info(code).name; }
int error_exit_code(ErrorCode code) { return info(code).exit_code; }
const char* error_default_hint(ErrorCode code) { return info(code).hint; }

Error::Error(ErrorCode code, const std::string& message, std::string hint)
    : std::runtime_error(message), code_(code), hint_(std::move(hint)) {
  if (hint_.empty()) hint_ = error_default_hint(code);
}

std::string format_error(const Error& error) {
  return str_cat(error_name(error.code()), ": ", error.what(), "\n  hint: ", error.hint());
}

Error error_of_current_exception() {
  try {
    throw;
  } catch (const Error& error) {
    return error;
  } catch (const c10::OutOfMemoryError& error) {
    return Error(ErrorCode::kMemory, "out of memory: " + first_line(error.what_without_backtrace()));
  } catch (const c10::Error& error) {
    // The CPU allocator's failure is a c10::Error of its own kind of text, not OutOfMemoryError.
    if (std::string(error.what_without_backtrace()).find("can't allocate memory") != std::string::npos)
      return Error(ErrorCode::kMemory, "out of host memory: " + first_line(error.what_without_backtrace()));
    // A bug report wants the stack: with TELETRON_BACKTRACE=1 (and TORCH_SHOW_CPP_STACKTRACES=1,
    // which makes LibTorch record it) the whole LibTorch message goes to stderr first.
    if (const char* trace = std::getenv("TELETRON_BACKTRACE"); trace != nullptr && std::string(trace) == "1")
      std::cerr << error.what() << std::endl;
    return Error(ErrorCode::kInternal, "LibTorch: " + first_line(error.what_without_backtrace()));
  } catch (const std::filesystem::filesystem_error& error) {
    return Error(ErrorCode::kIo, error.what());
  } catch (const std::bad_alloc&) {
    return Error(ErrorCode::kMemory, "out of host memory");
  } catch (const std::exception& error) {
    return Error(ErrorCode::kInternal, error.what());
  } catch (...) {
    return Error(ErrorCode::kInternal, "an exception of unknown type");
  }
}

}  // namespace tt
