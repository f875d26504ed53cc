// The assembly every format reader shares: opening stored files (plain or NAME.zst),
// reading shard headers in parallel, merging shards into one Checkpoint, sorting and
// de-duplicating tensor names, and choosing which other files the mount shows. A reader
// (core/checkpoint/*_reader.cc) supplies only what is its own: which files, and a
// ShardParser that turns one stored file into ShardContents.
//
// Every message names the offending file. Functions here are not thread-safe on one
// Checkpoint; ReadShards and EarlyShards run parsers on worker threads (parsers must be
// thread-safe, as ByteSources are).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/cache/read_context.h"
#include "core/checkpoint/checkpoint.h"
#include "core/source/source_dir.h"

namespace ckptfs {

inline constexpr std::string_view kZstdSuffix = ".zst";

bool EndsWith(std::string_view s, std::string_view suffix);
// "x.safetensors" for "x.safetensors.zst"; other names unchanged.
std::string_view StripZst(std::string_view name);

// The whole of a small file (an index, a state file); Corruption past `max_bytes`.
Result<std::string> ReadWhole(const ByteSource& source, uint64_t max_bytes = 256ull << 20);

// `name` is listed in `dir`, plain or as NAME.zst (no request).
bool ListsStored(const SourceDir& dir, const std::string& name);
// ListsStored, or, where the store cannot list (HTTP without an autoindex), there when
// asked (SourceDir::Has of NAME).
Result<bool> StoredOrAsked(const SourceDir& dir, const std::string& name);

// Opens `name` as a StoredFile with its mode and mtime.
Result<StoredFile> OpenStored(const SourceDir& dir, const std::string& name);

// A weight file as stored: NAME itself, or NAME.zst decoded on read (plain wins when both
// exist: same bytes, no decoding). `dir.files` decides first; a name it does not list is
// asked for (SourceDir::Has), so names learnt from an index work on a server too. A
// listing leaves out what is no regular file: where neither name is listed, NAME.zst is
// still opened, so that a FIFO, socket or device there is refused as what it is ("a FIFO,
// not served"), not as missing.
Result<StoredFile> OpenWeightFile(const SourceDir& dir, const std::string& name,
                                  ReadContext& context);

// What one weight file holds, shard-local: storage indices count from 0, `shard` fields
// are set by AddShard.
struct ShardContents {
  std::vector<Tensor> tensors;
  std::vector<Storage> storages;
  Metadata metadata;
  std::string state_json;  // non-tensor values as a JSON object; empty if none
  // Bytes decoded at open (Checkpoint::decoded): storages with `shard` kDecodedData lie
  // here, not in the shard, and AddShard makes them a decoded file.
  std::string decoded;
  // Set for a torch.save file: would torch.load(FILE, weights_only=True) load it.
  std::optional<WeightsOnlyVerdict> weights_only;
};
inline constexpr uint32_t kDecodedData = UINT32_MAX;

struct TorchFile;
// One torch.save file's storages and tensors as shard `shard_no` (torch_reader.cc): what
// the torch and split readers make of each file. Empties `file`.
ShardContents FromTorchFile(TorchFile& file, uint32_t shard_no);

// Reads the header(s) of one stored weight file. Must be thread-safe.
using ShardParser = Result<ShardContents> (*)(const StoredFile& shard, uint32_t shard_no);

// Adds one shard's tensors and storages as shard `shard_no`, merging its metadata and
// state (first shard wins). Empties `shard`. Its decoded data becomes
// ckpt.decoded.back(), numbered past the shards: every shard must already be in
// ckpt.shards.
void AddShard(Checkpoint& ckpt, ShardContents& shard, uint32_t shard_no);

// A weight file opened and read before the index that names it was parsed.
struct EarlyShard {
  std::string name;  // as the index would name it (without .zst)
  Result<StoredFile> file = Status::Ok();
  Result<ShardContents> contents = Status::Ok();
};

// Opens and reads, on worker threads, the weight files a local index is likely to name,
// while the caller parses the index: at a million tensors the index alone is a second of
// parsing, and the shards as much again. What the index does not name is dropped unseen;
// what it names is used as if opened and read after it, errors included.
class EarlyShards {
 public:
  // `names` sorted and distinct.
  EarlyShards(const SourceDir& dir, std::vector<std::string> names, ReadContext& context,
              ShardParser parse);
  ~EarlyShards() { Wait(); }
  EarlyShards(const EarlyShards&) = delete;
  EarlyShards& operator=(const EarlyShards&) = delete;

  // Helps with what is left, then waits for every read; names sorted.
  std::vector<EarlyShard>& Wait();

 private:
  void Work();

  const SourceDir& dir_;
  ReadContext& context_;
  ShardParser parse_;
  std::vector<EarlyShard> shards_;
  std::atomic<size_t> next_{0};
  std::vector<std::thread> threads_;
};

// Calls work(i) for each i in [0, jobs), several at once: on the calling thread and up to
// seven more, never more threads than jobs; returns when every call has. Shard headers are
// independent, and a checkpoint of thousands of shards would otherwise parse them one core
// at a time. `work` must be thread-safe.
void ForEachInParallel(size_t jobs, const std::function<void(size_t)>& work);

// Opens and reads the weight files `names` (as named by `named_by`, for messages) into
// `ckpt` in that order, several at once, taking those already read from `early`; then
// sorts the tensors (SortTensors).
Status OpenShards(const SourceDir& dir, const std::vector<std::string>& names,
                  const std::string& named_by, ReadContext& context, ShardParser parse,
                  Checkpoint& ckpt, std::vector<EarlyShard>* early = nullptr);

// Sorts tensors by name; a name stored in two shards is Corruption naming both.
Status SortTensors(Checkpoint& ckpt);

// The tensor named `name` in a sorted checkpoint, or null.
const Tensor* FindTensor(const Checkpoint& ckpt, std::string_view name);

// Shows every file of `dir` the checkpoint does not use (shards and index are shown
// under shards/) at the mount root, except `hidden` (sorted: weights of another copy, a
// stale weight file, anything that would only mislead). The packed CRC sidecar is read,
// never shown. A file the source refuses to serve (a symlink leaving a local SOURCE, not
// a regular file) is left out with a line to `options.warn`: unlike a shard, the
// checkpoint is whole without it.
Status OpenOthers(const SourceDir& dir, const ReadOptions& options,
                  const std::vector<std::string>& hidden, Checkpoint& ckpt);

}  // namespace ckptfs
