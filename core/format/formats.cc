#include "core/format/formats.h"

#include <sys/stat.h>

#include <algorithm>

#include "core/checkpoint/assembly.h"
#include "core/checkpoint/hf_layout.h"
#include "core/checkpoint/model.h"
#include "core/encoding/names.h"
#include "core/source/open_source.h"

namespace ckptfs {

// The entries (each defined in its <fmt>_reader.cc).
FormatReader SafetensorsFormat();
FormatReader TorchFormat();
FormatReader TensorflowFormat();
FormatReader SplitFormat();
FormatReader DeepSpeedFormat();
FormatReader DcpFormat();
FormatReader KerasFormat();
FormatReader GgufFormat();

std::span<const FormatReader> Formats() {
  // Order is precedence among equal ranks (see formats.h).
  static const FormatReader kTable[] = {
      SafetensorsFormat(), TorchFormat(), TensorflowFormat(), SplitFormat(),
      DeepSpeedFormat(),   DcpFormat(),   KerasFormat(),      GgufFormat(),
  };
  return kTable;
}

const FormatReader* FormatNamed(std::string_view name) {
  for (const FormatReader& f : Formats()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::vector<std::string> ProbeNames() {
  std::vector<std::string> names;
  for (const FormatReader& f : Formats()) {
    for (std::string_view name : f.probe_names) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.emplace_back(name);
    }
  }
  return names;
}

bool AnyFormatAcceptsFile(std::string_view name) {
  return std::any_of(Formats().begin(), Formats().end(),
                     [&](const FormatReader& f) { return f.accepts_file(name); });
}

namespace {

std::string LooksFor() {
  std::string kinds;
  for (const FormatReader& f : Formats()) {
    kinds += (kinds.empty() ? "" : "; ") + std::string(f.looks_for);
  }
  return kinds;
}

// The refusal when no entry claims anything.
Status NothingClaimed(const SourceDir& dir, const std::string& shown) {
  if (!dir.named.empty() && !dir.Lists(dir.named)) {
    if (!dir.remote) return Status::NotFound(shown + ": no such file or directory");
    // A server that cannot list was asked for the name: it answered 404 (S3: NoSuchKey).
    return Status::NotFound(shown + (shown.rfind("s3://", 0) == 0 ? ": not found (no such key)"
                                                                  : ": not found (HTTP 404)"));
  }
  if (!dir.named.empty()) return NotACheckpointFile(shown);
  return Status::InvalidArgument(shown + ": no checkpoint found (" + LooksFor() + ")");
}

// Every name a checkpoint gives, whatever its format, under the one rule of
// TensorNameProblem: parsers differ in what their names may hold (a TF key is any bytes),
// the paths they become do not.
// The refusal names the file the name came from: a tensor's shard, a TF key's index.
Status CheckTensorNames(const Checkpoint& ckpt, const std::string& shown) {
  auto refuse = [&](const std::vector<StoredFile>& files, size_t file, std::string_view name,
                    const std::string& problem) {
    const std::string where = file < files.size() ? shown + ": " + files[file].stored_name : shown;
    return Status::Corruption(where + ": tensor \"" + std::string(name.substr(0, 200)) +
                              "\": " + problem + " (names become paths)");
  };
  for (const std::string& key : TensorKeys(ckpt)) {
    if (std::string problem = TensorNameProblem(key); !problem.empty()) {
      return refuse(ckpt.index, 0, key, problem);
    }
  }
  for (const Tensor& t : ckpt.tensors) {
    if (std::string problem = TensorNameProblem(t.name); !problem.empty()) {
      return refuse(ckpt.shards, t.shard, t.name, problem);
    }
  }
  return Status::Ok();
}

}  // namespace

Result<SourceDir> OpenSourceDir(const std::string& source, ReadContext& context,
                                const RemoteOptions& remote) {
  static const SourceProbe probe{ProbeNames(), AnyFormatAcceptsFile, NotACheckpointFile};
  return OpenSourceDir(source, context, remote, probe);
}

Status NotACheckpointFile(const std::string& shown) {
  std::string kinds;
  for (const FormatReader& f : Formats()) {
    if (f.file_kinds.empty()) continue;  // a directory format (DeepSpeed's tags)
    kinds += (kinds.empty() ? "" : ", ") + std::string(f.file_kinds);
  }
  return Status::InvalidArgument(shown + ": not a " + kinds +
                                 " file (or .zst of one), or a directory");
}

// Both openers come here (OpenCheckpoint through this one): the table's walk over `dir`,
// then the checks and choices every format shares.
Result<Checkpoint> OpenCheckpointIn(const SourceDir& dir, ReadContext& context,
                                    const OpenOptions& options, const std::string& shown_or_empty) {
  const std::string& shown = shown_or_empty.empty() ? dir.path : shown_or_empty;
  const FormatReader* winner = nullptr;
  std::optional<Claim> best;
  for (const FormatReader& f : Formats()) {
    CKPTFS_ASSIGN_OR_RETURN(std::optional<Claim> claim, f.detect(dir));
    if (!claim || (best && claim->rank >= best->rank)) continue;
    winner = &f;
    best = std::move(claim);
    if (best->rank == Claim::Rank::kNamed) break;
  }
  if (!best) return NothingClaimed(dir, shown);
  CKPTFS_RETURN_IF_ERROR(best->problem);
  Checkpoint ckpt;
  ckpt.source_path = dir.path;
  ckpt.remote = dir.remote;
  ckpt.format = winner;
  CKPTFS_RETURN_IF_ERROR(winner->read(dir, *best, context, ckpt));
  CKPTFS_RETURN_IF_ERROR(CheckTensorNames(ckpt, shown));
  CKPTFS_RETURN_IF_ERROR(SelectModel(ckpt, options.model_key, shown));
  // A SOURCE naming one file or prefix is that checkpoint alone.
  if (dir.named.empty()) {
    const std::vector<std::string> hidden =
        winner->hidden ? winner->hidden(dir, ckpt) : std::vector<std::string>();
    CKPTFS_RETURN_IF_ERROR(OpenOthers(dir, context.options(), hidden, ckpt));
    CKPTFS_RETURN_IF_ERROR(OpenHfModuleFolders(dir, context.options(), ckpt));
  }
  return ckpt;
}

Result<Checkpoint> ReadFilesOnly(const SourceDir& dir, const std::vector<std::string>& folders,
                                 ReadContext& context, const std::vector<std::string>& hidden) {
  Checkpoint ckpt;
  ckpt.source_path = dir.path;
  ckpt.remote = dir.remote;
  ckpt.files_only = true;
  CKPTFS_RETURN_IF_ERROR(OpenOthers(dir, context.options(), hidden, ckpt));
  auto warn = [&](const std::string& line) {
    if (context.options().warn) context.options().warn(JoinShown(dir.path, line));
  };
  for (const std::string& folder : folders) AddFolderFiles(dir, folder, warn, ckpt);
  return ckpt;
}

Result<Checkpoint> OpenCheckpoint(const std::string& source_path, ReadContext& context,
                                  const OpenOptions& options, const SourceDir* listed) {
  std::optional<SourceDir> own;
  if (!listed) {
    CKPTFS_ASSIGN_OR_RETURN(own, OpenSourceDir(source_path, context, options.remote));
    listed = &*own;
  }
  const SourceDir& dir = *listed;
  // A local path naming a file or prefix is shown as written; a URL redacted (dir.path).
  const bool local_named = !dir.remote && !dir.named.empty();
  CKPTFS_ASSIGN_OR_RETURN(Checkpoint ckpt, OpenCheckpointIn(dir, context, options,
                                                            local_named ? source_path : dir.path));
  struct stat st;
  if (!dir.remote && dir.named.empty() && ::stat(source_path.c_str(), &st) == 0) {
    ckpt.dir_mtime = st.st_mtim;
  }
  return ckpt;
}

}  // namespace ckptfs
