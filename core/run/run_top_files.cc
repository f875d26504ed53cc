// A run's files as SOURCE has them: a diffusers pipeline's listing (its components and
// top files) and a training run's top files (RunListing::top_files). See run_listing.h.
#include <algorithm>
#include <set>

#include "core/checkpoint/hf_layout.h"
#include "core/checkpoint/natural_order.h"
#include "core/run/run_entries.h"
#include "core/transient.h"

namespace ckptfs {

namespace {

// The kFiles entry of `dir` (named ".", complete), before its files sign it.
RunEntry FilesEntry(const SourceDir& dir) {
  RunEntry files;
  files.name = std::string(kPipelineFilesEntry);
  files.kind = RunEntry::Kind::kFiles;
  files.mode = dir.reach;
  files.complete = true;
  return files;
}

// Subdirectory `name` of `dir`, or nullopt with a line in `skipped` when it does not open
// (a link out of SOURCE); a failure that may pass (IsTransient) fails the listing.
Result<std::optional<SourceDir>> OpenFolder(const SourceDir& dir, const std::string& name,
                                            std::vector<std::string>& skipped) {
  auto sub = dir.OpenDir(name);
  if (sub.ok()) return std::optional<SourceDir>(std::move(sub).value());
  if (IsTransient(sub.status())) return sub.status();
  skipped.push_back(JoinShown(dir.path, EscapeControlChars(sub.status().message())));
  return std::optional<SourceDir>();
}

// Whether folder `name` of `dir` (opened as `sub`) holds weights, or a refusal of them for
// its ERROR file: then it is a component, added to `run` (DirectoryEntry). A failure that
// may pass (IsTransient) fails the listing.
Result<bool> AddComponent(const SourceDir& dir, const SourceDir& sub, const std::string& name,
                          RunListing& run) {
  auto claim = TopClaim(sub, nullptr);
  if (!claim.ok() && IsTransient(claim.status())) return claim.status();
  if (claim.ok() && !*claim) return false;
  TrainerStates ignored;
  CKPTFS_ASSIGN_OR_RETURN(std::optional<RunEntry> entry,
                          DirectoryEntry(dir, name, run.skipped, ignored));
  if (entry) run.entries.push_back(std::move(*entry));
  return true;
}
}  // namespace

// A diffusers pipeline (run_listing.h): DiffusionPipeline.save_pretrained writes
// model_index.json ({"unet": ["diffusers", "UNet2DConditionModel"], ...}) and has each
// component save_pretrained into the folder of its name; from_pretrained reads
// model_index.json, then loads each component from that folder. So a folder the format
// table claims is a component entry, and everything else (top files, folders of config
// and vocabulary only) is the kFiles entry, shown unchanged. model_index.json is not read:
// the folders say what is there, and a component it does not name is still shown.
Result<RunListing> ListPipeline(const SourceDir& dir) {
  RunListing run;
  run.pipeline = true;
  run.skipped = dir.left_out;
  RunEntry files = FilesEntry(dir);
  for (const std::string& f : dir.files) CKPTFS_RETURN_IF_ERROR(AddListedFile(dir, f, files));
  for (const std::string& name : dir.dirs) {
    if (!IsPlainName(name)) {
      run.skipped.push_back(dir.path + ": \"" + EscapeControlChars(name.substr(0, 200)) +
                            "\" is not a plain name, skipped");
      continue;
    }
    CKPTFS_ASSIGN_OR_RETURN(std::optional<SourceDir> sub, OpenFolder(dir, name, run.skipped));
    if (!sub) continue;
    CKPTFS_ASSIGN_OR_RETURN(const bool component, AddComponent(dir, *sub, name, run));
    if (component) continue;
    if (files.folders.size() == kMaxModuleFolders) {
      run.skipped.push_back(JoinShown(dir.path, name) + "/: more than " +
                            std::to_string(kMaxModuleFolders) +
                            " folders without weights, skipped");
      continue;
    }
    files.folders.push_back(name);
    // Its files sign the entry: a rewritten tokenizer is new files, never mixed bytes.
    for (const std::string& f : sub->files) {
      CKPTFS_RETURN_IF_ERROR(AddListedFile(*sub, f, files, name + "/"));
    }
  }
  std::sort(run.entries.begin(), run.entries.end(),
            [](const RunEntry& a, const RunEntry& b) { return NaturalLess(a.name, b.name); });
  run.entries.push_back(std::move(files));
  return run;
}

// A sentence-transformers model (run_listing.h): module folders the format table claims
// are components; the top checkpoint, with its views and folders without weights, is the
// kFiles entry (views = true), signed by every file of SOURCE's top and its folders.
Result<RunListing> ListModules(const SourceDir& dir) {
  RunListing run;
  run.pipeline = true;
  run.modules = true;
  run.skipped = dir.left_out;
  RunEntry top = FilesEntry(dir);
  top.views = true;
  for (const std::string& f : dir.files) CKPTFS_RETURN_IF_ERROR(AddListedFile(dir, f, top));
  for (const std::string& name : dir.dirs) {
    if (!IsPlainName(name)) continue;
    auto sub = dir.OpenDir(name);
    if (!sub.ok()) {
      if (IsTransient(sub.status())) return sub.status();
      continue;  // the top checkpoint's module folders say it, if modules.json names it
    }
    CKPTFS_ASSIGN_OR_RETURN(const bool component, AddComponent(dir, *sub, name, run));
    if (component) continue;
    for (const std::string& f : sub->files) {
      CKPTFS_RETURN_IF_ERROR(AddListedFile(*sub, f, top, name + "/"));
    }
  }
  std::sort(run.entries.begin(), run.entries.end(),
            [](const RunEntry& a, const RunEntry& b) { return NaturalLess(a.name, b.name); });
  run.entries.push_back(std::move(top));
  return run;
}

// Every top file that is no file entry, and every folder that is no directory entry: the
// final model HF Trainer leaves at the top, a TF `checkpoint` state file and its prefixes,
// DeepSpeed's `latest`, logs. An entry's own files are shown under its name once it is
// complete (never half-saved), so an entry of any completeness is left out here, and so is
// a folder whose name carries a step (StepInName) without being an entry.
Status AddTopFiles(const SourceDir& dir, RunListing& run) {
  RunEntry top = FilesEntry(dir);
  std::set<std::string, std::less<>> entry_files, entry_dirs;
  for (const RunEntry& e : run.entries) {
    if (e.kind == RunEntry::Kind::kFile) entry_files.insert(e.name);
    if (e.kind == RunEntry::Kind::kDirectory) entry_dirs.insert(e.name);
  }
  for (const std::string& f : dir.files) {
    if (entry_files.count(f)) {
      top.hidden.push_back(f);
      continue;
    }
    CKPTFS_RETURN_IF_ERROR(AddListedFile(dir, f, top));
  }
  std::sort(top.hidden.begin(), top.hidden.end());
  for (const std::string& name : dir.dirs) {
    if (entry_dirs.count(name) || !IsPlainName(name)) continue;
    // A folder named with a step that is no entry is a save in progress (`checkpoint-300/`
    // holding config.json so far, Trainer's `tmp-checkpoint-300/`): never shown half-saved.
    if (StepInName(name)) continue;
    if (top.folders.size() == kMaxModuleFolders) {
      run.skipped.push_back(JoinShown(dir.path, name) + "/: more than " +
                            std::to_string(kMaxModuleFolders) +
                            " folders beside the entries, not shown");
      continue;
    }
    CKPTFS_ASSIGN_OR_RETURN(std::optional<SourceDir> sub, OpenFolder(dir, name, run.skipped));
    if (!sub) continue;
    top.folders.push_back(name);
    // Its files sign the entry: a rewritten file is a new slot, never mixed bytes.
    for (const std::string& f : sub->files) {
      CKPTFS_RETURN_IF_ERROR(AddListedFile(*sub, f, top, name + "/"));
    }
  }
  run.top_files = std::move(top);
  return Status::Ok();
}

}  // namespace ckptfs
