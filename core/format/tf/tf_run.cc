#include "core/format/tf/tf_run.h"

#include <algorithm>
#include <map>
#include <regex>

#include "core/checkpoint/assembly.h"
#include "core/checkpoint/natural_order.h"
#include "core/format/tf/checkpoint_state.h"
#include "core/transient.h"

namespace ckptfs {
namespace {

constexpr std::string_view kStateFile = "checkpoint";
constexpr std::string_view kIndexSuffix = ".index";
constexpr uint64_t kMaxStateFileBytes = 1u << 20;

// The prefixes a state file lists, each by its last component; `latest` the one it names.
struct TfState {
  std::vector<std::string> prefixes;
  std::string latest;
  std::string latest_written;  // as written, for messages
  // model_checkpoint_path is empty: tf.train.latest_checkpoint raises (get_checkpoint_state:
  // "Invalid checkpoint state"), so the run has no latest, never a guess.
  bool names_no_latest = false;
  // Prefixes in a subdirectory (`sub/ckpt-3`): the prefix's name -> that subdirectory.
  std::map<std::string, std::string> within;
};

std::string WithinOf(const TfState& state, const std::string& prefix) {
  auto it = state.within.find(prefix);
  return it == state.within.end() ? std::string() : it->second;
}

// The state file's prefixes, or nullopt (with a line) when it cannot be read.
std::optional<TfState> ReadTfState(const SourceDir& dir, std::vector<std::string>& skipped) {
  const std::string shown = JoinShown(dir.path, std::string(kStateFile));
  auto file = dir.open(std::string(kStateFile));
  if (!file.ok()) {
    skipped.push_back(file.status().message());
    return std::nullopt;
  }
  auto text = ReadWhole(**file, kMaxStateFileBytes);
  if (!text.ok()) {
    skipped.push_back(text.status().message());
    return std::nullopt;
  }
  auto parsed = tf::ParseCheckpointState(*text, shown);
  if (!parsed.ok()) {
    skipped.push_back(parsed.status().message());
    return std::nullopt;
  }
  TfState state;
  state.names_no_latest = parsed->model_checkpoint_path.empty();
  std::vector<std::string> written = parsed->all_model_checkpoint_paths;
  std::vector<std::string> refused;  // TF lists the latest twice: one line per path
  if (!parsed->model_checkpoint_path.empty()) written.push_back(parsed->model_checkpoint_path);
  for (const std::string& path : written) {
    // Taken by its last component, inside SOURCE: a stale absolute path from another
    // machine names the prefix beside the state file; nothing outside is ever named.
    auto prefix = tf::StatePathInSource(path, shown);
    // A relative path with directories (`sub/ckpt-3`) is joined to the state file's
    // directory (checkpoint_management.get_checkpoint_state): the prefix in that
    // subdirectory, shown by its own name; one of the same name beside the state file wins.
    std::string within;
    if (prefix.ok() && prefix->find('/') != std::string::npos && IsPlainPath(*prefix)) {
      const size_t slash = prefix->rfind('/');
      within = prefix->substr(0, slash);
      *prefix = prefix->substr(slash + 1);
      const auto known = state.within.find(*prefix);
      if (dir.Lists(*prefix + std::string(kIndexSuffix)) ||
          (known != state.within.end() && known->second != within) ||
          (known == state.within.end() && std::find(state.prefixes.begin(), state.prefixes.end(),
                                                    *prefix) != state.prefixes.end())) {
        within.clear();
        prefix = Status::InvalidArgument("taken");
      }
    }
    if (!prefix.ok() || !IsPlainName(*prefix)) {
      if (std::find(refused.begin(), refused.end(), path) != refused.end()) continue;
      refused.push_back(path);
      skipped.push_back(shown + ": \"" + EscapeControlChars(path.substr(0, 200)) +
                        "\" is not a prefix in " + dir.path + ", skipped");
      continue;
    }
    if (std::find(state.prefixes.begin(), state.prefixes.end(), *prefix) == state.prefixes.end()) {
      state.prefixes.push_back(*prefix);
    }
    if (!within.empty()) state.within[*prefix] = within;
    if (&path == &written.back() && !parsed->model_checkpoint_path.empty()) {
      state.latest = *prefix;
      state.latest_written = path;
    }
  }
  return state;
}

// The prefixes of `dir` that are there: those the state file lists whose PREFIX.index is
// listed (or, where the store cannot list, there when asked), then every other listed
// PREFIX.index. Prefixes whose files are gone (retention) are absent.
Result<std::vector<std::string>> PresentPrefixes(const SourceDir& dir, const TfState& state,
                                                 std::vector<std::string>& skipped) {
  std::vector<std::string> prefixes;
  for (const std::string& prefix : state.prefixes) {
    const std::string index = prefix + std::string(kIndexSuffix);
    const std::string within = WithinOf(state, prefix);
    if (!within.empty()) {
      // In a subdirectory: there when its index is (a link out of SOURCE, a missing
      // directory: not an entry, with a line).
      auto home = OpenDirPath(dir, within);
      if (!home.ok() && IsTransient(home.status())) return home.status();
      if (!home.ok()) {
        skipped.push_back(JoinShown(dir.path, std::string(kStateFile)) + ": \"" +
                          EscapeControlChars(within + "/" + prefix) +
                          "\": " + EscapeControlChars(home.status().message()) + ", skipped");
        continue;
      }
      CKPTFS_ASSIGN_OR_RETURN(const bool there, StoredOrAsked(*home, index));
      if (there) prefixes.push_back(prefix);
      continue;
    }
    if (!dir.probe || ListsStored(dir, index)) continue;  // listed: found below
    CKPTFS_ASSIGN_OR_RETURN(const bool there, dir.Has(index));
    if (there) prefixes.push_back(prefix);
  }
  for (const std::string& f : dir.files) {
    std::string plain(StripZst(f));
    if (EndsWith(plain, kIndexSuffix)) {
      std::string prefix = plain.substr(0, plain.size() - kIndexSuffix.size());
      if (std::find(prefixes.begin(), prefixes.end(), prefix) == prefixes.end()) {
        prefixes.push_back(std::move(prefix));
      }
    }
  }
  return prefixes;
}

// A prefix the state file no longer lists but TF keeps: CheckpointManager (and Saver) drop
// a checkpoint kept by keep_checkpoint_every_n_hours from all_model_checkpoint_paths and
// leave its files. Its step is below every listed one (save_counter only grows); a prefix
// of a step past the listed ones is a save the state file does not name yet.
bool KeptButUnlisted(const TfState& state, const std::string& prefix) {
  const std::optional<uint64_t> own = StepInName(prefix);
  if (!own || state.prefixes.empty()) return false;
  for (const std::string& listed : state.prefixes) {
    const std::optional<uint64_t> step = StepInName(listed);
    if (!step || *step <= *own) return false;
  }
  return true;
}

// Why bundle `prefix` of `dir` is not whole, "" when it is.
Result<std::string> PrefixIncomplete(const SourceDir& dir, const std::string& prefix) {
  CKPTFS_ASSIGN_OR_RETURN(const bool has_index,
                          StoredOrAsked(dir, prefix + std::string(kIndexSuffix)));
  if (!has_index) return prefix + std::string(kIndexSuffix) + " is missing";
  static const std::regex kData(R"(\.data-(\d+)-of-(\d+)$)");
  uint64_t total = 0;
  std::vector<bool> seen;
  for (const std::string& f : dir.files) {
    std::string plain(StripZst(f));
    std::smatch m;
    if (!plain.starts_with(prefix + ".data-") || !std::regex_search(plain, m, kData)) continue;
    if (m[1].length() > 6 || m[2].length() > 6) continue;
    const uint64_t k = std::stoull(m[1]), n = std::stoull(m[2]);
    if (total == 0) {
      total = n;
      seen.assign(n, false);
    }
    if (n == total && k < n) seen[k] = true;
  }
  // No data file listed: a bundle of scalars only, or a store that cannot list.
  for (uint64_t k = 0; k < total; ++k) {
    if (!seen[k]) {
      return prefix + ": data file " + std::to_string(k) + " of " + std::to_string(total) +
             " is missing";
    }
  }
  return std::string();
}

}  // namespace

Result<std::optional<RunRecord>> TfRunRecord(const SourceDir& dir,
                                             std::vector<std::string>& skipped) {
  CKPTFS_ASSIGN_OR_RETURN(const bool has, dir.Has(std::string(kStateFile)));
  if (!has) return std::optional<RunRecord>();
  std::optional<TfState> state = ReadTfState(dir, skipped);
  if (!state) return std::optional<RunRecord>();
  RunRecord record;
  record.title = "checkpoint file";
  if (state->names_no_latest) {
    record.no_latest =
        "checkpoint file: model_checkpoint_path is empty: no latest "
        "(tf.train.latest_checkpoint raises)";
  }
  record.latest = state->latest;
  record.latest_unusable = "checkpoint file: latest \"" +
                           EscapeControlChars(state->latest_written.substr(0, 200)) +
                           "\" is no complete entry, skipped";
  for (const auto& [prefix, within] : state->within) record.holds.push_back(within);
  CKPTFS_ASSIGN_OR_RETURN(const std::vector<std::string> prefixes,
                          PresentPrefixes(dir, *state, skipped));
  for (const std::string& prefix : prefixes) {
    RecordEntry entry;
    entry.name = prefix;
    entry.within = WithinOf(*state, prefix);
    entry.key_file = prefix + std::string(kIndexSuffix);
    entry.named =
        std::find(state->prefixes.begin(), state->prefixes.end(), prefix) != state->prefixes.end();
    entry.kept = !entry.named && KeptButUnlisted(*state, prefix);
    record.entries.push_back(std::move(entry));
  }
  return std::optional<RunRecord>(std::move(record));
}

Result<std::string> TfBundleIncomplete(const SourceDir& dir, const std::string& prefix) {
  // A SavedModel's variables/variables: the bundle's files are one directory down.
  const size_t slash = prefix.rfind('/');
  if (slash == std::string::npos) return PrefixIncomplete(dir, prefix);
  auto inner = dir.OpenDir(prefix.substr(0, slash));
  if (!inner.ok()) {
    if (IsTransient(inner.status())) return inner.status();
    return inner.status().message();
  }
  return PrefixIncomplete(*inner, prefix.substr(slash + 1));
}

}  // namespace ckptfs
