// SourceDir: what a checkpoint directory offers, whatever stores it (local disk, an HTTP
// server, an S3 prefix, a map of in-memory files in tests). Discovery (core/checkpoint/
// formats.h) and every format reader see SOURCE only through it, so a format written
// against it works for local and remote SOURCEs alike.
//
// - `files` are the names discovery looks at and the mount may show: a directory's
//   listing (local, S3), the names a server answered when asked (HTTP cannot list: it is
//   asked for every name the format table probes), or the one file a path SOURCE names.
// - Has(name) says whether a file exists even when `files` does not list it: a name
//   learnt from another file's contents (a shard an index names, a TF data file), or a
//   sibling of a single-file SOURCE. It asks the store only when `files` is not the whole
//   story (`probe` set).
// - `dirs` are its subdirectory names as the listing gave them (local, S3 CommonPrefixes,
//   an HTTP autoindex listing); run discovery (core/run/run_listing.h) looks at them.
// - Info(name) gives a file's or subdirectory's size and time (and ETag) as listed, for
//   run listings and their signatures, without opening it.
// - OpenDir(name) opens a child directory with the same bounds (a SavedModel's
//   `variables/`): local stays beneath SOURCE, HTTP is base + "name/", S3 a prefix.
//
// Names are plain file names: no '/', never "." or "..". Stores refuse others. A SourceDir
// is used by one opening at a time; the sources it opens are thread-safe ByteSources.
#pragma once

#include <time.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/source/byte_source.h"
#include "core/source/local_dir.h"
#include "core/status.h"

namespace ckptfs {

// `name` under `dir` as messages show it: "dir/name", or `name` alone when `dir` is empty
// or ".".
std::string JoinShown(std::string_view dir, std::string_view name);

// What a listing says of one name: bytes, time, and the store's version tag if any.
struct ListedInfo {
  uint64_t size = 0;
  struct timespec mtime = {};  // {0, 0}: unknown
  std::string etag;            // S3 ETag; empty elsewhere
};

struct SourceDir {
  std::string path;  // shown in messages and stats
  // The most a file of this directory may show (LocalDirectory::DirectoryReach): a
  // directory others cannot search in SOURCE is shown no more open. Remote: 0555.
  uint32_t reach = 0555;
  std::vector<std::string> files;  // plain names, sorted
  // Subdirectory names, sorted. Local: real subdirectories and links to directories
  // (OpenDir refuses a link that leaves SOURCE, naming it); S3: CommonPrefixes; HTTP: the
  // directories of an autoindex JSON listing. Empty when the store cannot tell.
  std::vector<std::string> dirs;
  // Names the listing saw but cannot offer (a dangling link, a link loop), one line each
  // saying why; run listings report them.
  std::vector<std::string> left_out;
  std::function<Result<std::unique_ptr<ByteSource>>(const std::string& name)> open;
  // Files come from a server (http, S3), opened as RemoteSources: the mount then shows
  // remote counters in stats.json and starts readahead with one block.
  bool remote = false;
  // Asks the store whether `name` exists (NotFound is false, other errors are errors).
  // Null when `files` lists everything there is.
  std::function<Result<bool>(const std::string& name)> probe;
  // Opens child directory `name`; null when the store has none (in-memory test dirs).
  std::function<Result<SourceDir>(const std::string& name)> open_dir;
  // The listed size and time of file or subdirectory `name`; null when the store gives
  // none (then Info opens the file and asks its ByteSource).
  std::function<Result<ListedInfo>(const std::string& name)> info;
  // The name SOURCE pointed at inside this directory (a file, or a prefix such as TF's
  // `ckpt-3` that is no file itself); empty when SOURCE is the directory. Only what
  // belongs to that name is read and shown.
  std::string named;

  // `name` is in `files`, or the store has it.
  Result<bool> Has(const std::string& name) const;
  // `name` is in `files` (no request).
  bool Lists(const std::string& name) const;
  // OpenDir: NotFound when there is no such directory or the store has no directories.
  Result<SourceDir> OpenDir(const std::string& name) const;
  // Size and time of `name`: `info`, else opening it (Size, MTime). NotFound if absent.
  Result<ListedInfo> Info(const std::string& name) const;
};

// A name a SOURCE may offer as its own: plain, printable, never "." or "..", no '/' or
// '\\', and no longer than a file name may be. Names a record writes (a state file's
// prefix, a `latest` tag) are taken only when they are such names.
bool IsPlainName(std::string_view name);
// A relative path of plain names joined by '/' (`sub/ckpt-3`).
bool IsPlainPath(std::string_view path);
// The directory `path` (IsPlainPath, or "" for `dir` itself) below `dir`, opened one plain
// name at a time, so a link out of SOURCE is refused as OpenDir refuses it.
Result<SourceDir> OpenDirPath(const SourceDir& dir, const std::string& path);

// A SourceDir over local directory `root` offering `files` (its listing, or the one file
// a path SOURCE names, then with a probe for siblings). Every file is opened through
// `root`, so nothing outside it is served (core/source/local_dir.h).
SourceDir LocalDir(std::shared_ptr<const LocalDirectory> root, std::vector<std::string> files,
                   bool listed_all = true);

// LocalDir over `root`'s listing. Links that leave SOURCE are offered too, so that opening
// one names it in a refusal (a shard) or a skipped-file line (anything else).
Result<SourceDir> ListLocalDir(std::shared_ptr<const LocalDirectory> root);

}  // namespace ckptfs
