#include "fs/ownership.h"

#include <grp.h>
#include <pwd.h>

#include <cerrno>
#include <vector>

namespace ckptfs {

Result<uint32_t> ParseMode(const std::string& option, const std::string& text) {
  std::string digits = text;
  if (digits.rfind("0o", 0) == 0 || digits.rfind("0O", 0) == 0) digits.erase(0, 2);
  // Four digits at most ("0644"); a value past 0777 (setuid, sticky) is refused below.
  const bool octal = !digits.empty() && digits.size() <= 4 &&
                     digits.find_first_not_of("01234567") == std::string::npos;
  const uint32_t value = octal ? static_cast<uint32_t>(std::stoul(digits, nullptr, 8)) : 0;
  if (!octal || value > 0777) {
    return Status::InvalidArgument(option + " " + text + ": not an octal mode from 0 to 0777");
  }
  return value;
}

Result<uint32_t> ParseOwner(const std::string& option, const std::string& text, bool group) {
  const char* what = group ? "group" : "user";
  if (!text.empty() && text.size() <= 10 && text.find_first_not_of("0123456789") == text.npos) {
    const uint64_t id = std::stoull(text);
    if (id < UINT32_MAX) return static_cast<uint32_t>(id);
    return Status::InvalidArgument(option + " " + text + ": not a " + what + " id below " +
                                   std::to_string(UINT32_MAX));
  }
  // getpwnam_r / getgrnam_r: reentrant, with a buffer grown while the entry does not fit.
  std::vector<char> buf(1024);
  for (int tries = 0; tries < 8 && !text.empty(); ++tries, buf.resize(buf.size() * 4)) {
    int err;
    if (group) {
      struct group entry, *found = nullptr;
      err = ::getgrnam_r(text.c_str(), &entry, buf.data(), buf.size(), &found);
      if (err == 0 && found) return static_cast<uint32_t>(found->gr_gid);
    } else {
      struct passwd entry, *found = nullptr;
      err = ::getpwnam_r(text.c_str(), &entry, buf.data(), buf.size(), &found);
      if (err == 0 && found) return static_cast<uint32_t>(found->pw_uid);
    }
    if (err != ERANGE) break;
  }
  return Status::InvalidArgument(option + " " + text + ": no such " + what +
                                 " (give a name or a numeric id)");
}

}  // namespace ckptfs
