// hf:// sources: a model repository on the Hugging Face Hub (or a server that speaks its
// API), read as a SourceDir. What the Hub sends, and what its own client does with it, is
// written down in huggingface_hub (docs/remote.md, "Hugging Face Hub", names the function
// each behaviour here follows):
//
// - hf://ORG/NAME[@REVISION][/PATH]: REVISION is a branch, a tag or a commit sha (default
//   `main`); one holding '/' is written with %2F (`@refs%2Fpr%2F3`), as HfFileSystem takes
//   it. PATH is a folder of the repo (a checkpoint inside it, or a run) or one file.
// - The revision is resolved once, when the source is opened, to a commit sha
//   (`/api/models/ORG/NAME/revision/REV`, HfApi.model_info); every later request names
//   that sha, so a branch that moves while mounted never mixes two commits' bytes.
// - The repo's files come from one recursive tree listing at that sha
//   (`/api/models/ORG/NAME/tree/SHA?recursive=true`, HfApi.list_repo_tree), following
//   `Link: <...>; rel="next"` pages (utils/_pagination.py): sizes without a request each.
// - A file is read from `/ORG/NAME/resolve/SHA/PATH` (hf_hub_url). Its first read asks
//   that URL with HEAD and no redirects (get_hf_file_metadata): a 200 means the endpoint
//   serves the bytes itself (small files: range GETs there, with the token); a redirect to
//   another host (LFS and Xet files: a CDN and a signed URL) means range GETs there, without
//   the token; a relative redirect (a renamed repo) is followed on the endpoint. A signed
//   URL that the CDN refuses later (it expired: 403) is resolved again, once per refusal.
// - The token (HF_TOKEN, else the file HF_TOKEN_PATH names, else HF_HOME/token, else
//   ~/.cache/huggingface/token; utils/_auth.py get_token) is sent as
//   `Authorization: Bearer` to the endpoint only, never to where a redirect leads, and
//   never shown: not in messages, logs, stats.json, /proc/mounts or `inspect`.
// - Errors are one line naming the repo, mapped from the Hub's X-Error-Code and
//   X-Error-Message as utils/_http.py hf_raise_for_status maps them: no token or a wrong
//   one, a gated repo, a repo, revision or path not found.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/cache/read_context.h"
#include "core/source/remote_options.h"
#include "core/source/source_dir.h"
#include "core/status.h"

namespace ckptfs {

bool IsHfUrl(std::string_view source);

struct HfUrl {
  std::string repo;      // "ORG/NAME"
  std::string revision;  // as given (decoded), "main" when not
  std::string path;      // "" or "a/b" inside the repo
  // "hf://ORG/NAME@REV/PATH" with the revision replaced by `sha` (when not empty): how
  // messages and stats name what is mounted.
  std::string Shown(std::string_view sha = {}) const;
};

// InvalidArgument (one line, naming `source`) unless `source` is hf://ORG/NAME[@REV][/PATH]
// with ORG and NAME plain names of letters, digits, '-', '_' and '.', a revision without
// control characters, and PATH plain names joined by '/'.
Result<HfUrl> ParseHfUrl(std::string_view source);

// The token huggingface_hub would use (see the top of this file), or empty when there is
// none. InvalidArgument when the one found holds anything but printable ASCII without
// spaces (it would end up in a header), naming where it came from, never its value.
Result<std::string> FindHfToken();

// The Hub's base URL: `hub.endpoint`, else HF_ENDPOINT, else https://huggingface.co; no
// trailing '/'.
std::string HfEndpoint(const HubOptions& hub);

// Opens hf:// `source` (see the top of this file). A PATH naming a file gives the SourceDir
// of its folder with `named` set, as a file path does locally. Every object is a
// RemoteSource sharing the mount's block cache and disk cache; its identity (the disk
// cache's key) is the repo, the commit, the path and the file's hash, which name its bytes.
Result<SourceDir> HfDir(const std::string& source, const RemoteOptions& remote,
                        ReadContext& context);

}  // namespace ckptfs
