#include "fs/mount_args.h"

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>

namespace ckptfs {
namespace {

// libfuse's splitting of an -o value: a backslash escapes the character after it, which
// stays escaped in the item (libfuse removes the backslash later, per option).
std::vector<std::string> SplitOptionList(const std::string& list) {
  std::vector<std::string> items(1);
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '\\' && i + 1 < list.size()) {
      items.back() += list.substr(i, 2);
      ++i;
    } else if (list[i] == ',') {
      items.emplace_back();
    } else {
      items.back() += list[i];
    }
  }
  items.erase(std::remove(items.begin(), items.end(), ""), items.end());
  return items;
}

std::string WithoutEscapes(const std::string& option) {
  std::string plain;
  for (char c : option) {
    if (c != '\\') plain += c;
  }
  return plain;
}

const LongOption* FindLongOption(const std::vector<LongOption>& options, std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  for (const LongOption& option : options) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

// One -o list into `out`: ours as long options, mount(8)'s dropped, the rest for libfuse.
Status ExpandOptionList(const std::string& list, const std::vector<LongOption>& options,
                        MountCaller caller, MountArgs& out) {
  for (const std::string& item : SplitOptionList(list)) {
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    if (const LongOption* ours = FindLongOption(options, name)) {
      if (ours->needs_value && eq == std::string::npos) {
        return Status::InvalidArgument("-o " + item + ": needs a value (-o " + name +
                                       "=VALUE, or --" + ours->name + " VALUE)");
      }
      const std::string value = eq == std::string::npos ? "" : WithoutEscapes(item.substr(eq + 1));
      if (eq != std::string::npos && value.empty()) {
        // CLI11 reads `--name=` as a missing value and takes the next argument for it;
        // an empty value (model_key=, every tensor) is its own argument.
        out.args.insert(out.args.end(), {"--" + ours->name, ""});
      } else {
        out.args.push_back("--" + ours->name + (eq == std::string::npos ? "" : "=" + value));
      }
    } else if (IsMountOnlyOption(item) ||
               (caller == MountCaller::kMountHelper && WithoutEscapes(item) == "rw")) {
      continue;
    } else {
      out.fuse_options.push_back(item);
    }
  }
  return Status::Ok();
}

// Edit distance with a swap of two neighbours as one edit (optimal string alignment),
// for suggesting an option a typo meant: "levle" is one edit from "level".
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The name of `options` within two edits of `name` (both spelt with '-'), the nearest
// first; "" when none is. Short names need a closer match: "ro" is not "rw".
std::string NearestOption(const std::string& name, const std::vector<LongOption>& options) {
  std::string best;
  size_t best_distance = 3;
  for (const LongOption& option : options) {
    const size_t distance = EditDistance(name, option.name);
    if (distance < best_distance && distance < option.name.size() / 2) {
      best = option.name;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace

std::string UnknownMountOptionLine(const std::string& item,
                                   const std::vector<LongOption>& options) {
  std::string name = WithoutEscapes(item.substr(0, item.find('=')));
  std::replace(name.begin(), name.end(), '_', '-');
  std::string best = NearestOption(name, options);
  std::replace(best.begin(), best.end(), '-', '_');
  const std::string line = "-o " + item + ": not a mount option of ckptfs or FUSE";
  if (!best.empty()) return line + "; did you mean -o " + best + "?";
  return line +
         " (every `ckptfs mount --help` long option is also -o name=value; FUSE's are in "
         "man ckptfs, MOUNT OPTIONS)";
}

std::optional<std::string> UnknownLongOptionLine(const std::vector<std::string>& args,
                                                 const std::vector<LongOption>& options,
                                                 const std::string& command) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) continue;
    const std::string name = arg.substr(2, arg.find('=') - 2);
    if (const LongOption* known = FindLongOption(options, name)) {
      if (known->needs_value && arg.find('=') == std::string::npos) ++i;  // its value
      continue;
    }
    const std::string line = "--" + name + ": not an option of " + command;
    const std::string best = NearestOption(name, options);
    if (!best.empty()) return line + "; did you mean --" + best + "?";
    return line + " (see " + command + " --help)";
  }
  return std::nullopt;
}

std::vector<LongOption> LongOptionsOf(const CLI::App& cmd) {
  std::vector<LongOption> out;
  for (const CLI::Option* option : cmd.get_options()) {
    const bool needs_value = option->get_type_size_min() > 0 && option->get_expected_min() > 0;
    for (const std::string& name : option->get_lnames()) out.push_back({name, needs_value});
  }
  return out;
}

Result<MountArgs> ExpandMountArgs(const std::vector<std::string>& args,
                                  const std::vector<LongOption>& options, MountCaller caller) {
  MountArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out.args.insert(out.args.end(), args.begin() + static_cast<ptrdiff_t>(i), args.end());
      break;
    }
    if (arg.rfind("-o", 0) == 0) {
      if (arg == "-o" && i + 1 == args.size()) {
        return Status::InvalidArgument("-o: needs a list of options (e.g. -o allow_other)");
      }
      const std::string list = arg == "-o" ? args[++i] : arg.substr(2);
      CKPTFS_RETURN_IF_ERROR(ExpandOptionList(list, options, caller, out));
      continue;
    }
    out.args.push_back(arg);
    // `--log-file -o` names a file called "-o": a value is never taken for an option.
    if (arg.rfind("--", 0) == 0 && arg.find('=') == std::string::npos && i + 1 < args.size()) {
      const LongOption* ours = FindLongOption(options, arg.substr(2));
      if (ours != nullptr && ours->needs_value) out.args.push_back(args[++i]);
    }
  }
  return out;
}

bool IsMountOnlyOption(const std::string& option) {
  static const char* const kNames[] = {"defaults", "auto",  "noauto", "nofail", "_netdev",
                                       "user",     "users", "nouser", "ro"};
  const std::string plain = WithoutEscapes(option);
  for (const char* name : kNames) {
    if (plain == name) return true;
  }
  return plain.rfind("x-", 0) == 0 || plain.rfind("comment=", 0) == 0 ||
         plain.rfind("user=", 0) == 0;
}

bool LooksLikeSource(const std::string& arg) {
  struct stat st;
  return arg.find('/') != std::string::npos || ::lstat(arg.c_str(), &st) == 0;
}

}  // namespace ckptfs
