// `ckptfs inspect RUN`: a training run's entries (core/run/run_listing.h), one line each,
// with latest and best and the records that chose them. Unlike a mount, which reads a
// checkpoint's headers on first use inside it, inspect opens every complete entry once (its
// headers only, one at a time) so that a checkpoint the mount would show as `ERROR` says so
// here too.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "core/format/formats.h"
#include "core/run/run_listing.h"
#include "fs/commands.h"

namespace ckptfs {
namespace {

// IsRun's rule (core/run/run_listing.h) in one line.
constexpr char kRunRule[] =
    "a directory with checkpoint subdirectories, several torch or Keras files that are each a "
    "checkpoint, a TF `checkpoint` file listing several prefixes, or a DeepSpeed `latest` file "
    "naming a tag directory is a run";

// What made `run` a run, for the header line.
std::string RuleOf(const RunListing& run) {
  size_t dirs = 0, files = 0, prefixes = 0, finals = 0;
  std::map<std::string, size_t> other_files;  // by format: Keras's ModelCheckpoint files
  for (const RunEntry& e : run.entries) {
    dirs += e.kind == RunEntry::Kind::kDirectory;
    if (e.kind == RunEntry::Kind::kFile) ++(e.format == "torch" ? files : other_files[e.format]);
    prefixes += e.kind == RunEntry::Kind::kPrefix;
    finals += e.kind == RunEntry::Kind::kFinal;
  }
  std::string parts;
  auto add = [&](size_t n, const char* what) {
    if (n) parts += (parts.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(dirs, "checkpoint subdirectories");
  add(files, "torch files that are each a checkpoint");
  for (const auto& [format, n] : other_files) {
    const FormatReader* f = FormatNamed(format);
    const std::string what =
        std::string(f ? f->title : format) + " files that are each a checkpoint";
    add(n, what.c_str());
  }
  add(prefixes, "TF prefixes of a `checkpoint` file");
  add(finals, "final model at the top (entry `final`)");
  return parts;
}

// A pipeline's components: its entries but the kFiles one.
size_t Components(const RunListing& run) {
  return static_cast<size_t>(
      std::count_if(run.entries.begin(), run.entries.end(),
                    [](const RunEntry& e) { return e.kind != RunEntry::Kind::kFiles; }));
}

const char* KindName(RunEntry::Kind kind) {
  switch (kind) {
    case RunEntry::Kind::kDirectory:
      return "directory";
    case RunEntry::Kind::kFile:
      return "file";
    case RunEntry::Kind::kPrefix:
      return "tf_prefix";
    case RunEntry::Kind::kFinal:
      return "final";
    case RunEntry::Kind::kFiles:
      return "files";
  }
  return "";
}

std::string TimeText(const timespec& t) {
  if (t.tv_sec == 0) return "-";
  struct tm tm;
  const time_t sec = t.tv_sec;
  gmtime_r(&sec, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

std::string StateText(const RunEntry& e) {
  if (e.kind == RunEntry::Kind::kFiles) {
    // A pipeline's top files and folders without weights, shown at the mount root.
    std::string folders;
    for (const std::string& f : e.folders) folders += " " + f + "/";
    return "top files" + (folders.empty() ? "" : ", folders" + folders);
  }
  if (!e.complete) return "incomplete: " + e.why_incomplete;
  if (!e.problem.empty()) return "complete, invalid: " + e.problem;
  return "complete";
}

nlohmann::json RunJson(const std::string& source, const RunListing& run) {
  using nlohmann::json;
  json entries = json::array();
  for (const RunEntry& e : run.entries) {
    entries.push_back({{"name", e.name},
                       {"kind", KindName(e.kind)},
                       {"step", e.step ? json(*e.step) : json(nullptr)},
                       {"format", e.format},
                       {"bytes", e.bytes},
                       {"mtime", e.mtime.tv_sec},
                       {"complete", e.complete},
                       {"why_incomplete", e.why_incomplete},
                       {"problem", e.problem}});
  }
  auto named = [](const std::string& name) { return name.empty() ? json(nullptr) : json(name); };
  return {{"source", source},
          {"run", true},
          {"pipeline", run.pipeline},
          {"components", Components(run)},
          {"rule", RuleOf(run)},
          {"latest", named(run.latest)},
          {"latest_from", named(run.latest_from)},
          {"best", named(run.best)},
          {"best_from", named(run.best_from)},
          {"entries", entries},
          {"skipped", run.skipped}};
}

void PrintRun(const std::string& source, const RunListing& run) {
  std::printf("source   %s\n", EscapeControlChars(source).c_str());
  if (run.pipeline) {
    if (run.modules) {
      std::printf(
          "pipeline: %zu components (%s beside module folders holding weights: a "
          "sentence-transformers model, one tree)\n",
          Components(run), std::string(kModulesIndex).c_str());
    } else {
      std::printf("pipeline: %zu components (a directory with %s is a diffusers pipeline)\n",
                  Components(run), std::string(kPipelineIndex).c_str());
    }
  } else {
    std::printf("run: %zu checkpoints (rule: %s; here %s)\n", run.entries.size(), kRunRule,
                RuleOf(run).c_str());
  }
  auto pointer = [](const char* what, const std::string& name, const std::string& from) {
    if (name.empty()) {
      std::printf("%-8s (none)\n", what);
    } else {
      std::printf("%-8s -> %s (by %s)\n", what, EscapeControlChars(name).c_str(), from.c_str());
    }
  };
  pointer("latest", run.latest, run.latest_from);
  pointer("best", run.best, run.best_from);
  size_t width = 4;
  for (const RunEntry& e : run.entries) width = std::max(width, e.name.size());
  std::printf("\n%-*s  %10s  %-11s  %10s  %-20s  %s\n", static_cast<int>(width), "NAME", "STEP",
              "FORMAT", "SIZE", "TIME", "STATE");
  for (const RunEntry& e : run.entries) {
    std::printf("%-*s  %10s  %-11s  %10s  %-20s  %s\n", static_cast<int>(width),
                EscapeControlChars(e.name).c_str(), e.step ? std::to_string(*e.step).c_str() : "-",
                e.format.empty() ? "-" : e.format.c_str(), HumanBytes(e.bytes).c_str(),
                TimeText(e.mtime).c_str(), EscapeControlChars(StateText(e)).c_str());
  }
  for (const std::string& line : run.skipped) {
    std::printf("skipped  %s\n", EscapeControlChars(line).c_str());
  }
}

// Opens each complete entry of `run` as the mount would, and records why one fails.
void CheckEntries(const SourceDir& dir, RunListing& run, ReadContext& context,
                  const OpenOptions& open) {
  for (RunEntry& e : run.entries) {
    if (!e.complete || !e.problem.empty() || e.kind == RunEntry::Kind::kFiles) continue;
    Result<SourceDir> entry_dir = EntrySourceDir(dir, e);
    Status status = entry_dir.status();
    if (entry_dir.ok())
      status = OpenCheckpointIn(*entry_dir, context, open, dir.path + "/" + e.name).status();
    if (!status.ok()) e.problem = status.message();
  }
  // As a mount does (RunTree): latest and best never name a checkpoint that fails to open.
  auto failed = [&run](const std::string& name) {
    return std::any_of(run.entries.begin(), run.entries.end(),
                       [&](const RunEntry& e) { return e.name == name && !e.problem.empty(); });
  };
  if (failed(run.best)) run.best.clear(), run.best_from.clear();
  if (!failed(run.latest)) return;
  const std::string bad = run.latest;
  run.latest.clear();
  std::optional<uint64_t> top;
  for (const RunEntry& e : run.entries) {
    if (!e.complete || !e.problem.empty()) continue;
    if (run.latest.empty() || (e.step && (!top || *e.step >= *top))) {
      if (e.step) top = e.step;
      run.latest = e.name;
    }
  }
  run.latest_from = "highest valid step; " + bad + " fails to open";
}

}  // namespace

namespace {

struct ListedRun {
  SourceDir dir;
  RunListing run;
};

// SOURCE listed as a run: nullopt when it is not one or cannot be listed here (the
// checkpoint path then reports); an error from what makes it a run (a DeepSpeed `latest`
// naming no tag says more than "no checkpoint found" would) or from listing it.
// A listing that is no run goes to `not_run`, when given, for the checkpoint path to open.
Result<std::optional<ListedRun>> ListIfRun(const std::string& source, ReadContext& context,
                                           const RemoteOptions& remote,
                                           std::optional<SourceDir>* not_run = nullptr) {
  auto dir = OpenSourceDir(source, context, remote);
  if (!dir.ok()) return std::optional<ListedRun>();
  auto is_run = IsRun(*dir);
  if (!is_run.ok() && is_run.status().code() == Status::Code::kInvalidArgument) {
    return is_run.status();
  }
  if (!is_run.ok() || !*is_run) {
    if (not_run) *not_run = std::move(*dir);
    return std::optional<ListedRun>();
  }
  auto run = ListRun(*dir);
  if (!run.ok()) return run.status();
  return std::optional<ListedRun>(ListedRun{std::move(*dir), std::move(*run)});
}

}  // namespace

std::optional<int> InspectIfRun(const std::string& source, bool json, ReadContext& context,
                                const OpenOptions& open, std::optional<SourceDir>* not_run) {
  auto listed = ListIfRun(source, context, open.remote, not_run);
  if (!listed.ok()) {
    PrintRefusal(listed.status());
    return ExitCodeForOpenFailure(listed.status());
  }
  if (!*listed) return std::nullopt;
  const SourceDir& dir = (*listed)->dir;
  RunListing& run = (*listed)->run;
  CheckEntries(dir, run, context, open);
  if (json) {
    std::puts(RunJson(dir.path, run)
                  .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                  .c_str());
  } else {
    PrintRun(dir.path, run);
  }
  return 0;
}

std::optional<Status> RunInsteadOfCheckpoint(const std::string& source, std::string_view verb,
                                             const ReadOptions& read_options,
                                             const RemoteOptions& remote) {
  ReadContext context(read_options);
  auto listed = ListIfRun(source, context, remote);
  if (!listed.ok() || !*listed || (*listed)->run.entries.empty()) return std::nullopt;
  const RunListing& run = (*listed)->run;
  // The entry a user most likely means: latest, else the last by name.
  const std::string& entry = run.latest.empty() ? run.entries.back().name : run.latest;
  std::string shown = source;
  while (shown.size() > 1 && shown.back() == '/') shown.pop_back();
  const size_t n = run.entries.size();
  return Status::InvalidArgument(shown + " is a training run (" + std::to_string(n) +
                                 (n == 1 ? " checkpoint" : " checkpoints") + "); " +
                                 std::string(verb) + " one: " + shown + "/" + entry);
}

}  // namespace ckptfs
