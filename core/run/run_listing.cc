// Run discovery: see run_listing.h for the rule. Everything here reads listings, sizes and
// times, plus a few small files (an index json, a `checkpoint` state file, 8 bytes of a
// safetensors header, a zip's tail, the latest checkpoint's trainer_state.json or a Lightning
// pickle): never a checkpoint's tensors, so listing 200 entries costs 200 directory listings.
#include "core/run/run_listing.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/checkpoint/assembly.h"
#include "core/checkpoint/hf_layout.h"
#include "core/checkpoint/natural_order.h"
#include "core/encoding/hf_index.h"
#include "core/encoding/ordered_json.h"
#include "core/encoding/torch_file.h"
#include "core/format/formats.h"
#include "core/run/run_entries.h"
#include "core/source/remote_dir.h"
#include "core/source/s3.h"
#include "core/transient.h"

namespace ckptfs {
namespace {

constexpr std::string_view kLightningLast = "last.ckpt";
constexpr std::string_view kSplitMap = "map.pt";
constexpr std::string_view kFinalEntry = "final";

// Files only Trainer._save_checkpoint writes, always before trainer_state.json (training_args.bin
// is left out: Trainer.save_model writes it too, with no state after it).
bool IsTrainerStatePart(const std::string& name) {
  const std::string_view plain = StripZst(name);
  return plain == "optimizer.pt" || plain == "scheduler.pt" || plain == "scaler.pt" ||
         (plain.starts_with("rng_state") && plain.ends_with(".pth"));
}

bool IsTrainerCompanion(std::string_view name) { return IsHfTrainerFile(name); }

// "model-00001-of-00003.bin": one shard of an indexed checkpoint.
bool IsHfShardName(std::string_view name) {
  static const std::regex kShard(R"(-\d+-of-\d+\.)");
  const std::string plain(StripZst(name));
  return std::regex_search(plain, kShard);
}

// A torch file that is a checkpoint of its own (not a trainer companion, not a shard).
bool IsTorchEntryFile(std::string_view name) {
  return !TorchWeightName(name).empty() && !IsTrainerCompanion(name) && !IsHfShardName(name) &&
         StripZst(name) != kSplitMap;
}

bool HasIndexJson(const SourceDir& dir) {
  return std::any_of(dir.files.begin(), dir.files.end(),
                     [](const std::string& f) { return EndsWith(f, ".index.json"); });
}

// The format whose run rule makes file `name` an entry of its own (RunRule::entry_file),
// or null: loose torch files are the run listing's own default.
const FormatReader* EntryFileFormat(std::string_view name) {
  for (const FormatReader& f : Formats()) {
    if (f.run.entry_file && f.run.entry_file(name)) return &f;
  }
  return nullptr;
}

// The files of `dir` that are entries of a run, one per checkpoint (x and x.zst once):
// loose torch files, and those a format's run rule names (Keras's ModelCheckpoint files).
std::vector<std::string> EntryFiles(const SourceDir& dir) {
  std::vector<std::string> names;
  if (HasIndexJson(dir) || dir.Lists(std::string(kSplitMap))) return names;
  for (const std::string& f : dir.files) {
    if (!IsTorchEntryFile(f) && !EntryFileFormat(f)) continue;
    // x.pt and x.pt.zst hold one checkpoint: the plain name stands for both.
    if (EndsWith(f, kZstdSuffix) && dir.Lists(std::string(StripZst(f)))) continue;
    names.push_back(f);
  }
  return names;
}

}  // namespace

// The claim the format table makes on `dir`, whichever entry wins (nullopt: none).
Result<std::optional<Claim>> TopClaim(const SourceDir& dir, std::string* format) {
  std::optional<Claim> best;
  for (const FormatReader& f : Formats()) {
    CKPTFS_ASSIGN_OR_RETURN(std::optional<Claim> claim, f.detect(dir));
    if (!claim || (best && claim->rank >= best->rank)) continue;
    best = std::move(claim);
    if (format) *format = std::string(f.name);
    if (best->rank == Claim::Rank::kNamed) break;
  }
  return best;
}

namespace {

// Subdirectories that belong to the checkpoint at the top of `dir`, not to a run: the
// directory of a claimed path (a SavedModel's `variables/`), and those a format writes
// inside another's checkpoint directory (FormatReader::RunRule::nested_dir: DeepSpeed's
// `global_stepN/` in an HF Trainer checkpoint).
bool PartOfTopCheckpoint(const std::optional<Claim>& top, const std::string& sub) {
  if (!top) return false;
  const size_t slash = top->file.find('/');
  if (slash != std::string::npos && top->file.substr(0, slash) == sub) return true;
  return std::any_of(Formats().begin(), Formats().end(), [&](const FormatReader& f) {
    return f.run.nested_dir && f.run.nested_dir(sub);
  });
}

// The run rule of the format named `format` (RunEntry::format), or none's.
const FormatReader::RunRule& RunRuleOf(const std::string& format) {
  static const FormatReader::RunRule kNone;
  const FormatReader* f = FormatNamed(format);
  return f ? f->run : kNone;
}

// The step entry name `name` of format `format` carries: the format's own rule where it
// names its files its own way (RunRule::step), else StepInName.
std::optional<uint64_t> StepOf(const std::string& format, const std::string& name) {
  const auto step = RunRuleOf(format).step;
  return step ? step(name) : StepInName(name);
}

// A format's record of the run directory (RunRule::record), in table order.
struct Record {
  const FormatReader* format;
  RunRecord record;
};
using Records = std::vector<Record>;

Result<Records> ReadRecords(const SourceDir& dir, std::vector<std::string>& skipped) {
  Records records;
  for (const FormatReader& f : Formats()) {
    if (!f.run.record) continue;
    CKPTFS_ASSIGN_OR_RETURN(std::optional<RunRecord> record, f.run.record(dir, skipped));
    if (record) records.push_back({&f, std::move(*record)});
  }
  return records;
}

// ---------------------------------------------------------------------------
// Completeness

}  // namespace

// Adds `name`'s listed size and time to `entry` (bytes, newest time, signature).
// `prefix`: the subdirectory `dir` is of the entry ("pytorch_model/"), for the signature.
// A file the store refuses (a link out of SOURCE, a FIFO) is the entry's own problem, for
// its mount to name (ERROR, or a non-weight file skipped with a line), never the run's: it
// signs the entry as refused, so that mending it makes a new checkpoint. Only a transient
// failure (out of descriptors, a timeout) fails, and with it the listing: tried again later.
Status AddListedFile(const SourceDir& dir, const std::string& name, RunEntry& entry,
                     const std::string& prefix) {
  Result<ListedInfo> listed = dir.Info(name);
  if (!listed.ok()) {
    if (IsTransient(listed.status())) return listed.status();
    entry.signature += prefix + name + ":refused;";
    return Status::Ok();
  }
  const ListedInfo& info = *listed;
  entry.bytes += info.size;
  if (Later(info.mtime, entry.mtime)) entry.mtime = info.mtime;
  entry.signature += prefix + name + ":" + std::to_string(info.size) + ":" +
                     std::to_string(info.mtime.tv_sec) + "." + std::to_string(info.mtime.tv_nsec) +
                     ":" + info.etag + ";";
  return Status::Ok();
}

namespace {

void Incomplete(RunEntry& entry, std::string why) {
  entry.complete = false;
  if (entry.why_incomplete.empty()) entry.why_incomplete = std::move(why);
}

// A torch.save zip is whole once its end of central directory record is: the writer puts
// it last, so a file still being written has none (or one that does not end the file).
Result<std::string> ZipTailProblem(const ByteSource& file) {
  constexpr uint64_t kEndRecord = 22;
  const uint64_t size = file.Size();
  if (size < kEndRecord) return std::string("shorter than a zip end record");
  const uint64_t tail = std::min<uint64_t>(size, kEndRecord + 0xffff);
  std::vector<uint8_t> buf(tail);
  CKPTFS_RETURN_IF_ERROR(file.ReadAt(size - tail, buf));
  for (uint64_t at = tail - kEndRecord + 1; at-- > 0;) {
    const uint8_t* p = buf.data() + at;
    if (p[0] != 'P' || p[1] != 'K' || p[2] != 5 || p[3] != 6) continue;
    const uint64_t comment = p[20] | (uint64_t{p[21]} << 8);
    if (at + kEndRecord + comment != tail) continue;
    const uint64_t cd_size =
        p[12] | (uint64_t{p[13]} << 8) | (uint64_t{p[14]} << 16) | (uint64_t{p[15]} << 24);
    const uint64_t cd_offset =
        p[16] | (uint64_t{p[17]} << 8) | (uint64_t{p[18]} << 16) | (uint64_t{p[19]} << 24);
    const uint64_t end_at = size - tail + at;
    // zip64 keeps the real values elsewhere (0xffffffff here); torch's are consistent.
    if (cd_offset != 0xffffffff && cd_size != 0xffffffff && cd_offset + cd_size > end_at) {
      return std::string("zip end record points past itself");
    }
    return std::string();
  }
  return std::string("no zip end record (still being written?)");
}

// Whether lone safetensors file `name` holds its whole header: 8 bytes of length, then
// that many bytes at least.
Result<std::string> SafetensorsTailProblem(const ByteSource& file) {
  if (file.Size() < 8) return std::string("shorter than a safetensors header");
  std::array<uint8_t, 8> len{};
  CKPTFS_RETURN_IF_ERROR(file.ReadAt(0, len));
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | len[static_cast<size_t>(i)];
  if (header > file.Size() - 8) return std::string("shorter than its header says");
  return std::string();
}

// A weights file that is whole by its own tail or head: `why` empty if so.
Result<std::string> FileProblem(const SourceDir& dir, const std::string& name) {
  // Compressed files are whole once decodable; the mount's reader checks them. A claim
  // names x.pt for a stored x.pt.zst.
  if (EndsWith(name, kZstdSuffix) || (!dir.Lists(name) && ListsStored(dir, name))) {
    return std::string();
  }
  const bool torch = !TorchWeightName(name).empty();
  const bool safetensors = !SafetensorsWeightName(name).empty();
  if (!torch && !safetensors) return std::string();
  auto file = dir.open(name);
  if (!file.ok()) {
    // Gone since listed: not whole. Refused (a link out of SOURCE): whole but bad, and the
    // mount's ERROR says why. A transient failure fails the listing, which is tried again.
    if (IsTransient(file.status())) return file.status();
    if (file.status().code() == Status::Code::kNotFound) return file.status().message();
    return std::string();
  }
  return torch ? ZipTailProblem(**file) : SafetensorsTailProblem(**file);
}

// HF index claim: every shard the index names is there.
Status CheckIndexed(const SourceDir& dir, const std::string& index_name, RunEntry& entry) {
  auto file = dir.open(index_name);
  auto text = file.ok() ? ReadWhole(**file, kMaxTrainerStateBytes) : file.status();
  if (!text.ok()) {
    // As FileProblem: transient fails the listing, gone is incomplete, refused is the
    // mount's ERROR.
    if (IsTransient(text.status())) return text.status();
    if (text.status().code() == Status::Code::kNotFound) Incomplete(entry, text.status().message());
    return Status::Ok();
  }
  auto index = ParseHfIndex(*text, JoinShown(dir.path, index_name));
  // A bad index is complete but invalid: the mount shows its error.
  if (!index.ok()) return Status::Ok();
  for (const std::string& shard : index->shard_files) {
    if (!ListsStored(dir, shard)) {
      Incomplete(entry, "shard " + shard + " named in " + index_name + " is missing");
      return Status::Ok();
    }
  }
  return Status::Ok();
}

// Fills the completeness of directory entry `entry` from its claim; a split checkpoint's
// key files (pytorch_model/) also go into its size and signature, from the one opening of
// that directory.
Status CheckDirectoryEntry(const SourceDir& sub, const Claim& claim, RunEntry& entry) {
  if (entry.name.starts_with("tmp-checkpoint-")) {
    Incomplete(entry, "being written (HF Trainer renames tmp-checkpoint-* when done)");
  }
  if (EndsWith(claim.file, ".index.json")) return CheckIndexed(sub, claim.file, entry);
  if (const auto incomplete = RunRuleOf(entry.format).incomplete) {
    // The format knows its files best (a TF bundle's index and data files).
    CKPTFS_ASSIGN_OR_RETURN(std::string why, incomplete(sub, claim.file));
    if (!why.empty()) Incomplete(entry, std::move(why));
    return Status::Ok();
  }
  if (!claim.problem.ok()) {
    // HF shards without their index: the index is written last.
    for (const std::string& f : sub.files) {
      if (IsHfShardName(f)) {
        Incomplete(entry, f + " without its index json");
        return Status::Ok();
      }
    }
    return Status::Ok();
  }
  // A claim inside a subdirectory (a split checkpoint's pytorch_model/map.pt): checked there.
  const size_t slash = claim.file.rfind('/');
  std::optional<SourceDir> inner;
  if (slash != std::string::npos) {
    const std::string inner_name = claim.file.substr(0, slash);
    auto opened = sub.OpenDir(inner_name);
    if (!opened.ok()) {
      if (IsTransient(opened.status())) return opened.status();
      Incomplete(entry, opened.status().message());
      return Status::Ok();
    }
    inner = std::move(opened).value();
    if (RunRuleOf(entry.format).signs_claimed_folder) {
      // The key files (a Trainer checkpoint's ZeRO tag) are the checkpoint: a rewritten one
      // is a new one.
      for (const std::string& f : inner->files) {
        CKPTFS_RETURN_IF_ERROR(AddListedFile(*inner, f, entry, inner_name + "/"));
      }
    }
  }
  CKPTFS_ASSIGN_OR_RETURN(
      std::string problem,
      FileProblem(inner ? *inner : sub,
                  slash == std::string::npos ? claim.file : claim.file.substr(slash + 1)));
  if (!problem.empty()) Incomplete(entry, claim.file + ": " + problem);
  return Status::Ok();
}

}  // namespace

// Entry for subdirectory `name` of `dir`, or nullopt (with a line) when it holds none;
// notes its trainer_state.json in `states`.
Result<std::optional<RunEntry>> DirectoryEntry(const SourceDir& dir, const std::string& name,
                                               std::vector<std::string>& skipped,
                                               TrainerStates& states) {
  auto sub = dir.OpenDir(name);
  if (!sub.ok()) {
    if (IsTransient(sub.status())) return sub.status();
    skipped.push_back(JoinShown(dir.path, EscapeControlChars(sub.status().message())));
    return std::optional<RunEntry>();
  }
  RunEntry entry;
  entry.name = name;
  entry.kind = RunEntry::Kind::kDirectory;
  entry.mode = sub->reach;
  std::optional<Claim> claim;
  auto top = TopClaim(*sub, &entry.format);
  if (!top.ok()) {
    // Remembered until the entry changes: never for a failure that may pass.
    if (IsTransient(top.status())) return top.status();
    entry.problem = top.status().message();
  } else {
    claim = std::move(top).value();
  }
  if (!claim && entry.problem.empty()) {
    skipped.push_back(JoinShown(dir.path, name) + "/: no checkpoint in it, skipped");
    return std::optional<RunEntry>();
  }
  entry.step = StepOf(entry.format, name);
  entry.complete = true;
  for (const std::string& f : sub->files) CKPTFS_RETURN_IF_ERROR(AddListedFile(*sub, f, entry));
  if (claim) {
    CKPTFS_RETURN_IF_ERROR(CheckDirectoryEntry(*sub, *claim, entry));
    if (entry.complete && !claim->problem.ok()) entry.problem = claim->problem.message();
  }
  if (sub->Lists(std::string(kTrainerState))) {
    if (auto info = sub->Info(std::string(kTrainerState)); info.ok()) {
      states.emplace_back(name, info->mtime);
    }
  } else if (std::any_of(sub->files.begin(), sub->files.end(), IsTrainerStatePart)) {
    Incomplete(entry, "HF Trainer files without trainer_state.json (written last)");
  }
  if (entry.bytes == 0 && entry.mtime.tv_sec == 0) {
    if (auto info = dir.Info(name); info.ok()) entry.mtime = info->mtime;
  }
  return std::optional<RunEntry>(std::move(entry));
}

namespace {

// The entry of the final model Trainer.save_model leaves at the top of an output dir beside
// its checkpoint-N/ (claimed as `top`, a `format` model with config.json), or nullopt with a
// line in `skipped` saying why it is not shown.
Result<std::optional<RunEntry>> FinalEntry(const SourceDir& dir, const Claim& top,
                                           const std::string& format,
                                           std::vector<std::string>& skipped) {
  const std::string shown = JoinShown(dir.path, top.file);
  const bool hf_model =
      RunRuleOf(format).final_model && top.rank != Claim::Rank::kInside && dir.Lists("config.json");
  if (!hf_model) {
    skipped.push_back(shown + ": a checkpoint at the top of the run, not one of its entries");
    return std::optional<RunEntry>();
  }
  const std::string name(kFinalEntry);
  if (dir.Lists(name) || std::binary_search(dir.dirs.begin(), dir.dirs.end(), name)) {
    skipped.push_back(shown + ": the final model is not shown: SOURCE has an entry named " + name);
    return std::optional<RunEntry>();
  }
  RunEntry entry;
  entry.name = name;
  entry.kind = RunEntry::Kind::kFinal;
  entry.format = format;
  entry.mode = dir.reach;
  entry.complete = true;
  for (const std::string& f : dir.files) CKPTFS_RETURN_IF_ERROR(AddListedFile(dir, f, entry));
  CKPTFS_RETURN_IF_ERROR(CheckDirectoryEntry(dir, top, entry));
  if (entry.complete && !top.problem.ok()) entry.problem = top.problem.message();
  return std::optional<RunEntry>(std::move(entry));
}

Result<RunEntry> FileEntry(const SourceDir& dir, const std::string& name) {
  RunEntry entry;
  entry.name = name;
  entry.kind = RunEntry::Kind::kFile;
  const FormatReader* format = IsTorchEntryFile(name) ? nullptr : EntryFileFormat(name);
  entry.format = format ? std::string(format->name) : std::string("torch");
  entry.step = StepOf(entry.format, name);
  entry.complete = true;
  // The entry is this one file: one the store refuses (a link out) is no entry, with a line.
  CKPTFS_RETURN_IF_ERROR(dir.Info(name).status());
  CKPTFS_RETURN_IF_ERROR(AddListedFile(dir, name, entry));
  std::string problem;
  if (format && format->run.incomplete) {
    CKPTFS_ASSIGN_OR_RETURN(problem, format->run.incomplete(dir, name));
  } else {
    CKPTFS_ASSIGN_OR_RETURN(problem, FileProblem(dir, name));
  }
  if (!problem.empty()) Incomplete(entry, problem);
  return entry;
}

// The entry of prefix `recorded` that `record` of format `format` makes: its files are
// those of its directory whose names start with "PREFIX.".
Result<RunEntry> PrefixEntry(const SourceDir& run_dir, const FormatReader& format,
                             const RunRecord& record, const RecordEntry& recorded) {
  RunEntry entry;
  entry.name = recorded.name;
  entry.kind = RunEntry::Kind::kPrefix;
  entry.within = recorded.within;
  entry.step = StepInName(recorded.name);
  entry.format = std::string(format.name);
  entry.complete = true;
  CKPTFS_ASSIGN_OR_RETURN(const SourceDir dir, OpenDirPath(run_dir, entry.within));
  bool listed = false;
  for (const std::string& f : dir.files) {
    if (!f.starts_with(recorded.name + ".")) continue;
    CKPTFS_RETURN_IF_ERROR(AddListedFile(dir, f, entry));
    listed = true;
  }
  if (format.run.incomplete) {
    CKPTFS_ASSIGN_OR_RETURN(std::string why, format.run.incomplete(dir, recorded.name));
    if (!why.empty()) Incomplete(entry, std::move(why));
  }
  // A store that cannot list: the key file's size and time sign the entry.
  if (!listed && entry.complete)
    CKPTFS_RETURN_IF_ERROR(AddListedFile(dir, recorded.key_file, entry));
  if (!recorded.named && !recorded.kept) {
    Incomplete(entry, "not (yet) named in the " + record.title);
  }
  return entry;
}

// Saves in progress that the files of each entry alone cannot tell (docs/run-discovery.md,
// "Saves in progress"), from the order the writers write:
// - HF Trainer (Trainer._save_checkpoint): the model (save_pretrained), optimizer,
//   scheduler, RNG state, then trainer_state.json. Where the run's checkpoints carry one, a
//   `checkpoint-N` directory without it is still being written.
// - A record written after the directory it names (RunRecord::latest_is_dir: DeepSpeed's
//   `latest`, after every rank's files): a directory of a higher step than the one it
//   names is still being written.
void AwaitSaves(RunListing& run, const TrainerStates& states, const Records& records) {
  static const std::regex kTrainerCheckpoint(R"(checkpoint-\d+)");
  const bool trainer_run =
      std::any_of(states.begin(), states.end(), [](const auto& s) { return !s.first.empty(); });
  for (RunEntry& e : run.entries) {
    if (!trainer_run || e.kind != RunEntry::Kind::kDirectory ||
        !std::regex_match(e.name, kTrainerCheckpoint)) {
      continue;
    }
    const bool has_state =
        std::any_of(states.begin(), states.end(), [&](const auto& s) { return s.first == e.name; });
    if (!has_state) Incomplete(e, "no trainer_state.json yet (HF Trainer writes it last)");
  }
  for (const auto& [format, record] : records) {
    if (!record.latest_is_dir || record.latest.empty()) continue;
    const RunEntry* named = Find(run, record.latest);
    if (!named || !named->step) continue;
    const uint64_t latest_step = *named->step;
    for (RunEntry& e : run.entries) {
      if (e.kind == RunEntry::Kind::kDirectory && e.step && *e.step > latest_step) {
        Incomplete(e, "being written: the " + record.title + " still names " + record.latest);
      }
    }
  }
}

// A prefix entry its record does not name now (RecordEntry::named): no checkpoint the
// format restores, so never latest by its step.
bool Unnamed(const Records& records, const RunEntry& e) {
  if (e.kind != RunEntry::Kind::kPrefix) return false;
  for (const auto& [format, record] : records) {
    for (const RecordEntry& r : record.entries) {
      if (r.name == e.name) return !r.named;
    }
  }
  return false;
}

void ChooseLatest(RunListing& run, const Records& records) {
  // A record's word first (DeepSpeed's `latest`, TF's model_checkpoint_path).
  for (const auto& [format, record] : records) {
    if (!record.latest.empty()) {
      if (Usable(Find(run, record.latest))) {
        run.latest = record.latest;
        run.latest_from = record.title;
        return;
      }
      // DeepSpeed's rank 0 writes `latest` before the other ranks finish their files.
      run.skipped.push_back(record.latest_unusable);
    }
    if (!record.no_latest.empty()) {
      run.skipped.push_back(record.no_latest);
      return;
    }
  }
  // Lightning: the newest "last" save (last.ckpt, last-v1.ckpt, ...: LightningLastVersion).
  const RunEntry* last = nullptr;
  for (const RunEntry& e : run.entries) {
    if (e.kind != RunEntry::Kind::kFile || !Usable(&e)) continue;
    const std::optional<uint64_t> version = LightningLastVersion(e.name);
    if (version && (!last || *version > *LightningLastVersion(last->name))) last = &e;
  }
  if (last) {
    run.latest = last->name;
    run.latest_from = "last.ckpt";
    return;
  }
  const RunEntry* highest = nullptr;
  const RunEntry* newest = nullptr;
  for (const RunEntry& e : run.entries) {
    // The final model is what training ended with, not a checkpoint it resumes from; a
    // prefix its record no longer names (TF keeps some unlisted) is no checkpoint restored.
    if (!Usable(&e) || e.kind == RunEntry::Kind::kFinal || Unnamed(records, e)) continue;
    if (e.step && (!highest || *e.step >= *highest->step)) highest = &e;
    if (!newest || !Later(newest->mtime, e.mtime)) newest = &e;
  }
  if (highest) {
    run.latest = highest->name;
    run.latest_from = "highest step";
  } else if (newest) {
    run.latest = newest->name;
    run.latest_from = "newest";
  }
}

}  // namespace

Result<bool> IsRun(const SourceDir& dir) {
  if (!dir.named.empty() || dir.Lists(std::string(kSplitMap))) return false;
  if (dir.Lists(std::string(kPipelineIndex))) return true;  // a diffusers pipeline
  std::string top_format;
  CKPTFS_ASSIGN_OR_RETURN(std::optional<Claim> top, TopClaim(dir, &top_format));
  for (const std::string& name : dir.dirs) {
    if (!IsPlainName(name) || PartOfTopCheckpoint(top, name)) continue;
    auto sub = dir.OpenDir(name);
    // A link out of SOURCE, not a directory: not an entry. A transient failure is said.
    if (!sub.ok() && IsTransient(sub.status())) return sub.status();
    if (!sub.ok()) continue;
    auto claim = TopClaim(*sub, nullptr);
    // One entry the table refuses (a file linking out) is no reason to refuse the run.
    if (!claim.ok() && IsTransient(claim.status())) return claim.status();
    if (claim.ok() && *claim) return true;  // the table claims split (map.pt) directories too
  }
  // A DeepSpeed tag's rank files are one checkpoint, not torch entries of a run.
  if (!RunRuleOf(top_format).torch_files_are_one && EntryFiles(dir).size() >= 2) return true;
  std::vector<std::string> ignored;
  CKPTFS_ASSIGN_OR_RETURN(const Records records, ReadRecords(dir, ignored));
  size_t named = 0;
  for (const auto& [format, record] : records) {
    // A DeepSpeed save dir: `latest` names a tag directory holding a checkpoint.
    if (record.latest_is_dir && !record.latest.empty() &&
        !PartOfTopCheckpoint(top, record.latest)) {
      if (auto sub = dir.OpenDir(record.latest); sub.ok()) {
        auto claim = TopClaim(*sub, nullptr);
        if (!claim.ok() && IsTransient(claim.status())) return claim.status();
        if (claim.ok() && *claim) return true;
      }
    }
    // A TF `checkpoint` file naming two prefixes that are there.
    named += std::count_if(record.entries.begin(), record.entries.end(),
                           [](const RecordEntry& e) { return e.named; });
  }
  // Nothing but a record that names nothing a run may show (`latest` naming `../secret_tag`):
  // its line says more than "no checkpoint found" would.
  if (named < 2 && !top) {
    for (const auto& [format, record] : records) {
      if (!record.problem.ok()) return record.problem;
    }
  }
  return named >= 2;
}

Result<RunListing> ListRun(const SourceDir& dir) {
  if (dir.Lists(std::string(kPipelineIndex))) return ListPipeline(dir);
  RunListing run;
  run.skipped = dir.left_out;
  TrainerStates trainer_states;
  std::string top_format;
  CKPTFS_ASSIGN_OR_RETURN(std::optional<Claim> top, TopClaim(dir, &top_format));
  // A sentence-transformers model whose modules hold weights: one tree, not a run.
  if (top && dir.Lists(std::string(kModulesIndex))) return ListModules(dir);
  std::optional<RunEntry> final_model;
  // A claim that is the run's record (TF's state file) names one of its entries.
  if (top && !RunRuleOf(top_format).claim_is_record && !top->file.empty()) {
    CKPTFS_ASSIGN_OR_RETURN(final_model, FinalEntry(dir, *top, top_format, run.skipped));
  }
  CKPTFS_ASSIGN_OR_RETURN(const Records records, ReadRecords(dir, run.skipped));
  std::vector<std::string> dirs = dir.dirs;
  // A store that cannot list (HTTP without an autoindex) still shows the tag `latest` names.
  if (dirs.empty()) {
    for (const auto& [format, record] : records) {
      if (record.latest_is_dir && !record.latest.empty()) dirs.push_back(record.latest);
    }
  }
  for (const std::string& name : dirs) {
    if (!IsPlainName(name)) {
      run.skipped.push_back(dir.path + ": \"" + EscapeControlChars(name.substr(0, 200)) +
                            "\" is not a plain name, skipped");
      continue;
    }
    if (PartOfTopCheckpoint(top, name)) continue;
    // The directory of a prefix a record names inside it (`sub/ckpt-3`): that prefix is
    // the entry.
    if (std::any_of(records.begin(), records.end(), [&](const Record& r) {
          return std::any_of(r.record.holds.begin(), r.record.holds.end(), [&](const auto& held) {
            return held == name || held.starts_with(name + "/");
          });
        })) {
      continue;
    }
    CKPTFS_ASSIGN_OR_RETURN(std::optional<RunEntry> entry,
                            DirectoryEntry(dir, name, run.skipped, trainer_states));
    if (entry) run.entries.push_back(std::move(*entry));
  }
  AwaitSaves(run, trainer_states, records);
  for (const std::string& name : EntryFiles(dir)) {
    if (final_model && StripZst(name) == top->file) continue;  // the final model's file
    if (!IsPlainName(name)) {
      run.skipped.push_back(dir.path + ": \"" + EscapeControlChars(name.substr(0, 200)) +
                            "\" is not a plain name, skipped");
      continue;
    }
    auto entry = FileEntry(dir, name);
    if (!entry.ok()) {
      if (IsTransient(entry.status())) return entry.status();
      run.skipped.push_back(JoinShown(dir.path, EscapeControlChars(entry.status().message())));
      continue;
    }
    run.entries.push_back(std::move(entry).value());
  }
  for (const auto& [format, record] : records) {
    for (const RecordEntry& recorded : record.entries) {
      if (!IsPlainName(recorded.name) || Find(run, recorded.name)) continue;
      CKPTFS_ASSIGN_OR_RETURN(RunEntry entry, PrefixEntry(dir, *format, record, recorded));
      run.entries.push_back(std::move(entry));
    }
  }
  if (final_model) run.entries.push_back(std::move(*final_model));
  std::sort(run.entries.begin(), run.entries.end(),
            [](const RunEntry& a, const RunEntry& b) { return NaturalLess(a.name, b.name); });
  CKPTFS_RETURN_IF_ERROR(AddTopFiles(dir, run));
  ChooseLatest(run, records);
  CKPTFS_RETURN_IF_ERROR(BestFromTrainerState(dir, std::move(trainer_states), run));
  if (run.best.empty()) CKPTFS_RETURN_IF_ERROR(BestFromLightning(dir, run));
  return run;
}

Result<SourceDir> EntrySourceDir(const SourceDir& dir, const RunEntry& entry) {
  if (entry.kind == RunEntry::Kind::kFiles) return dir;  // its folders: entry.folders
  if (!IsPlainName(entry.name)) {
    return Status::InvalidArgument(dir.path + ": \"" + EscapeControlChars(entry.name) +
                                   "\" is not an entry name");
  }
  if (entry.kind == RunEntry::Kind::kDirectory) return dir.OpenDir(entry.name);
  SourceDir one = dir;
  if (entry.kind == RunEntry::Kind::kFinal) {
    one.dirs.clear();  // its checkpoint-N/ are the run's, not the final model's
    return one;
  }
  if (entry.kind == RunEntry::Kind::kPrefix && !entry.within.empty()) {
    if (!IsPlainPath(entry.within)) {
      return Status::InvalidArgument(dir.path + ": \"" + EscapeControlChars(entry.within) +
                                     "\" is not a plain path");
    }
    CKPTFS_ASSIGN_OR_RETURN(one, OpenDirPath(dir, entry.within));
  }
  const std::vector<std::string> files = std::move(one.files);
  one.dirs.clear();
  one.named = entry.name;
  one.files.clear();
  for (const std::string& f : files) {
    const bool mine = entry.kind == RunEntry::Kind::kFile
                          ? f == entry.name
                          : f.starts_with(entry.name + ".") && !EndsWith(f, ".index.json");
    if (mine) one.files.push_back(f);
  }
  if (entry.kind == RunEntry::Kind::kFile && one.files.empty()) {
    return Status::NotFound(JoinShown(dir.path, entry.name) + ": no such file");
  }
  return one;
}

// The helpers run_entries.h declares for run_best.cc.

std::string LastComponent(std::string path) {
  while (!path.empty() && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::optional<uint64_t> LightningLastVersion(std::string_view name) {
  static const std::regex kLastVersion(R"(last-v(\d{1,18})\.ckpt)");
  const std::string plain(StripZst(name));
  if (plain == kLightningLast) return 0;
  std::smatch m;
  if (!std::regex_match(plain, m, kLastVersion)) return std::nullopt;
  return std::stoull(m[1]);
}

bool Later(const timespec& a, const timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
}

Status Skip(std::vector<std::string>& skipped, const Status& why) {
  skipped.push_back(why.message());
  return Status::Ok();
}

}  // namespace ckptfs
