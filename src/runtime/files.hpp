// Publishing a file or a directory under the name readers look for: the one durability rule
// of trainer. Everything is written under a temporary name first; publish() then fsyncs it,
// renames it to the final name and fsyncs the directory that holds that name.
//
// Why all three: a rename can reach the disk before the data it names (ext4 and XFS order
// neither), so without the first fsync a crash just after the rename can leave a truncated or
// empty file under the final name, which a reader trusts (a checkpoint's `latest`, a dataset's
// .idx, a model.safetensors); without the last one the rename itself may be lost, and a step
// that depends on it (pruning older checkpoints, reporting success) runs on a name that will
// not survive the crash.
#pragma once

#include <string>

namespace trainer::runtime {

// Makes `path` (a file or a directory) durable: its data, or its entries. Throws
// std::runtime_error naming it.
void fsync_path(const std::string& path);

// fsync `tmp` (a file or a directory whose contents were published or fsynced already), rename it
// to `final_path` (replacing a file, or an empty directory, of that name) and fsync the
// parent directory of `final_path`. Throws std::runtime_error naming the paths.
void publish(const std::string& tmp, const std::string& final_path);

// Writes `text` to `path` + ".tmp" and publishes it as `path`.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace trainer::runtime
