// Small durable-file helpers shared by checkpoints, weight files and datasets: fsync, a checked
// text write, rename with a clear error, quiet path tests, and the "[2, 3, 4]" spelling of shapes
// in messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

/// Flushes a file's or a folder's data and metadata to disk (a rename is only durable once the
/// folder holding it has been fsynced too). Throws kIo.
void fsync_path(const std::string& path, bool directory);

/// Writes `text` to `path` through one fd, checking every call (a full disk is a kIo error that
/// says so), then fsyncs it.
void write_text_synced(const std::string& path, const std::string& text);

/// The whole file as text; kIo naming the path when it cannot be opened.
std::string read_text_file(const std::string& path);

/// std::filesystem::rename, throwing kIo naming both paths.
void rename_or_throw(const std::string& from, const std::string& to);

/// Non-throwing tests: a permission error reads as "not there" instead of escaping as a
/// std::filesystem_error that main() would not recognise.
bool is_file(const std::string& path);
bool is_dir(const std::string& path);

/// `folder`/`name` (std::filesystem::path's operator/).
std::string join_path(const std::string& folder, const std::string& name);

/// "[16, 9, 60, 104]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace tt
