#include "core/source/s3.h"

#include <tinyxml2.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/source/http_source.h"

namespace ckptfs {
namespace {

constexpr std::string_view kScheme = "s3://";
constexpr size_t kMaxKeyBytes = 1024;               // S3's own limit
constexpr size_t kMaxNameBytes = 255;               // NAME_MAX: what a mount can show
constexpr uint64_t kMaxListingBytes = 16ull << 20;  // one page of 1000 keys is < 1 MiB
constexpr size_t kMaxListedObjects = 1'000'000;
constexpr size_t kMaxTokenBytes = 4096;
constexpr char kDefaultRegion[] = "us-east-1";

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool IsControl(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

bool LooksLikeWeightsFile(std::string_view name) {
  if (EndsWith(name, ".zst")) name.remove_suffix(4);
  for (std::string_view suffix : {".safetensors", ".bin", ".pt", ".pth"}) {
    if (EndsWith(name, suffix) && name.size() > suffix.size()) return true;
  }
  return false;
}

bool IsIpv4(std::string_view host) {
  return !host.empty() && host.find_first_not_of("0123456789.") == std::string_view::npos;
}

// Empty if `bucket` follows S3's general-purpose bucket naming rules, else why not.
std::string BucketProblem(std::string_view bucket) {
  if (bucket.empty()) return "no bucket name";
  if (bucket.size() < 3 || bucket.size() > 63) return "bucket names are 3 to 63 characters";
  if (bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos) {
    return "bucket names use only lower-case letters, digits, '.' and '-'";
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(bucket.front()) || !alnum(bucket.back())) {
    return "bucket names begin and end with a letter or digit";
  }
  if (bucket.find("..") != std::string::npos) return "bucket names have no two adjacent dots";
  if (IsIpv4(bucket)) return "bucket names are not IP addresses";
  for (std::string_view prefix : {"xn--", "sthree-", "amzn-s3-demo-"}) {
    if (StartsWith(bucket, prefix)) return "bucket names do not begin with " + std::string(prefix);
  }
  for (std::string_view suffix : {"-s3alias", "--ol-s3", ".mrap", "--x-s3"}) {
    if (EndsWith(bucket, suffix)) return "bucket names do not end with " + std::string(suffix);
  }
  return "";
}

// Empty if `key` is usable, else why not.
std::string KeyProblem(std::string_view key) {
  if (key.size() > kMaxKeyBytes) return "key longer than 1024 bytes";
  if (std::any_of(key.begin(), key.end(), IsControl)) return "control character in the key";
  size_t start = 0;
  while (start < key.size()) {
    const size_t slash = std::min(key.find('/', start), key.size());
    const std::string_view segment = key.substr(start, slash - start);
    if (segment.empty()) return "empty path segment ('//') in the key";
    if (segment == "." || segment == "..") return "'.' or '..' segment in the key";
    start = slash + 1;
  }
  return "";
}

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::string Env(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  return value ? std::string(value) : std::string();
}

bool ReadFile(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *text = s.str();
  return true;
}

const std::vector<std::pair<std::string, std::string>>* Section(const IniFile& ini,
                                                                const std::string& name) {
  for (const auto& [section, values] : ini) {
    if (section == name) return &values;
  }
  return nullptr;
}

std::string Value(const std::vector<std::pair<std::string, std::string>>* section,
                  std::string_view key) {
  if (section == nullptr) return "";
  for (const auto& [k, v] : *section) {
    if (k == key) return v;
  }
  return "";
}

// "http://host:port/path" -> scheme "http://", host "host:port", path "/path" (no trailing
// '/'). Empty scheme if unusable.
struct Endpoint {
  std::string scheme, host, path;
};

Result<Endpoint> ParseEndpoint(const std::string& text, const std::string& shown) {
  Endpoint e;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (StartsWith(text, scheme)) e.scheme = std::string(scheme);
  }
  const std::string refusal = "S3 endpoint " + RedactedUrl(text) + ": ";
  if (e.scheme.empty()) {
    return Status::InvalidArgument(refusal + "not an http:// or https:// URL (for " + shown + ")");
  }
  const std::string rest = text.substr(e.scheme.size());
  const size_t slash = rest.find('/');
  e.host = rest.substr(0, slash);
  if (slash != std::string::npos) e.path = rest.substr(slash);
  while (!e.path.empty() && e.path.back() == '/') e.path.pop_back();
  if (e.host.empty() || e.host.find('@') != std::string::npos ||
      text.find_first_of("?# ") != std::string::npos ||
      std::any_of(text.begin(), text.end(), IsControl)) {
    return Status::InvalidArgument(refusal + "expected SCHEME://HOST[:PORT][/PATH] (for " + shown +
                                   ")");
  }
  return e;
}

std::string HostName(const std::string& host_port) {
  if (!host_port.empty() && host_port.front() == '[') return host_port;  // IPv6 literal
  return host_port.substr(0, host_port.find(':'));
}

// A profile's section of ~/.aws/config: [profile NAME], or [default] for the default one.
const std::vector<std::pair<std::string, std::string>>* ConfigSection(const IniFile& config,
                                                                      const std::string& profile) {
  auto* section = Section(config, "profile " + profile);
  if (section == nullptr && profile == "default") section = Section(config, "default");
  return section;
}

struct Credentials {
  std::string key, secret, token;
};

// The credentials of the environment or the profile; all empty: anonymous.
Result<Credentials> FindCredentials(const EnvLookup& env, const IniFile& credentials_file,
                                    const IniFile& config_file, const std::string& profile,
                                    bool profile_named, const std::string& where) {
  Credentials c;
  c.key = Env(env, "AWS_ACCESS_KEY_ID");
  c.secret = Env(env, "AWS_SECRET_ACCESS_KEY");
  if (!c.key.empty() || !c.secret.empty()) {
    if (c.key.empty() || c.secret.empty()) {
      return Status::InvalidArgument(
          std::string(c.key.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") +
          " is set but " + (c.key.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") +
          " is not (for " + where + ")");
    }
    c.token = Env(env, "AWS_SESSION_TOKEN");
    return c;
  }
  auto* section = Section(credentials_file, profile);
  if (section == nullptr || Value(section, "aws_access_key_id").empty()) {
    // ~/.aws/config may hold credentials too, under [profile NAME] (or [default]).
    auto* config = ConfigSection(config_file, profile);
    if (config != nullptr && !Value(config, "aws_access_key_id").empty()) section = config;
  }
  if (section != nullptr) {
    c.key = Value(section, "aws_access_key_id");
    c.secret = Value(section, "aws_secret_access_key");
    c.token = Value(section, "aws_session_token");
  }
  if (c.key.empty() != c.secret.empty()) {
    return Status::InvalidArgument("AWS profile " + profile + " has " +
                                   (c.key.empty() ? "a secret key but no access key id"
                                                  : "an access key id but no secret key") +
                                   " (for " + where + ")");
  }
  if (c.key.empty() && profile_named && ConfigSection(config_file, profile) == nullptr &&
      Section(credentials_file, profile) == nullptr) {
    return Status::InvalidArgument("AWS_PROFILE " + profile +
                                   ": no such profile in the AWS credentials or config file (for " +
                                   where + ")");
  }
  return c;
}

bool ValidRegion(const std::string& region) {
  return !region.empty() && region.size() <= 64 &&
         region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos;
}

// The text of `parent`'s only child `name`; nullptr (with *dup set) if there are several.
const tinyxml2::XMLElement* OnlyChild(const tinyxml2::XMLElement* parent, const char* name,
                                      bool* duplicate) {
  const tinyxml2::XMLElement* first = parent->FirstChildElement(name);
  *duplicate = first != nullptr && first->NextSiblingElement(name) != nullptr;
  return first;
}

// The element's text, if it holds nothing but text (or nothing).
// "2024-05-01T12:00:00.000Z" (fraction optional) as seconds since the epoch, or 0.
int64_t ParseIsoTime(const std::string& text) {
  struct tm tm = {};
  const char* end = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return 0;
  if (*end == '.') end += std::strspn(end + 1, "0123456789") + 1;
  if (std::string_view(end) != "Z") return 0;
  const time_t t = ::timegm(&tm);
  return t > 0 ? static_cast<int64_t>(t) : 0;
}

bool TextOf(const tinyxml2::XMLElement* e, std::string* out) {
  if (e->FirstChildElement() != nullptr) return false;
  const char* text = e->GetText();
  *out = text ? text : "";
  return true;
}

// tinyxml2 takes a bare '&' ("a &amp b") as text; XML does not.
bool EntitiesWellFormed(std::string_view xml) {
  for (size_t at = xml.find('&'); at != std::string_view::npos; at = xml.find('&', at + 1)) {
    const size_t semi = xml.find(';', at);
    if (semi == std::string_view::npos || semi - at > 10) return false;
    const std::string_view name = xml.substr(at + 1, semi - at - 1);
    const bool named =
        name == "amp" || name == "lt" || name == "gt" || name == "quot" || name == "apos";
    const bool decimal = name.size() > 1 && name[0] == '#' &&
                         name.find_first_not_of("0123456789", 1) == std::string_view::npos;
    const bool hex = name.size() > 2 && name[0] == '#' && name[1] == 'x' &&
                     name.find_first_not_of("0123456789abcdefABCDEF", 2) == std::string_view::npos;
    if (!named && !decimal && !hex) return false;
  }
  return true;
}

bool ParseSize(const std::string& text, uint64_t* size) {
  if (text.empty() || text.size() > 19 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (v > static_cast<unsigned long long>(std::numeric_limits<int64_t>::max())) return false;
  *size = v;
  return true;
}

Status ListingError(const S3Target& target, const S3Url& url, const HttpResponse& response) {
  const std::string shown = url.ToString();
  const std::string code = S3ErrorCode(response.body);
  const std::string why = code.empty() ? "HTTP " + std::to_string(response.status)
                                       : "HTTP " + std::to_string(response.status) + " " + code;
  if (response.status == 403) {
    const bool anonymous = target.http.sigv4.access_key.empty();
    return Status::IoError(shown + ": access denied (" + why + ")" +
                               (anonymous ? "; no AWS credentials were found, so the request "
                                            "was unsigned (set AWS_ACCESS_KEY_ID and "
                                            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
                                          : ""),
                           EACCES);
  }
  if (code == "NoSuchBucket") {
    return Status::NotFound(shown + ": no such bucket " + target.bucket);
  }
  if (response.status >= 300 && response.status <= 399 && !response.location.empty()) {
    return Status::IoError(shown + ": the endpoint redirects to " + response.location +
                           "; not followed (signed requests are never redirected: the "
                           "credentials would go with them)");
  }
  if (code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" ||
      response.status == 301) {
    return Status::IoError(shown + ": the bucket is not in region " + target.http.sigv4.region +
                           " (" + why + "); give its region with --region");
  }
  if (response.status == 404) return Status::NotFound(shown + ": not found (" + why + ")");
  return Status::IoError(shown + ": listing failed (" + why + ")");
}

}  // namespace

bool IsS3Url(std::string_view url) { return StartsWith(url, kScheme); }

Result<S3Url> ParseS3Url(const std::string& url) {
  const std::string shown = RedactedUrl(url);
  if (!IsS3Url(url)) return Status::InvalidArgument(shown + ": not an s3:// URL");
  const std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  S3Url out;
  out.bucket = rest.substr(0, slash);
  if (out.bucket.find('@') != std::string::npos) {
    return Status::InvalidArgument(shown +
                                   ": s3:// URLs carry no credentials (use AWS_ACCESS_KEY_ID / "
                                   "AWS_SECRET_ACCESS_KEY or AWS_PROFILE)");
  }
  if (std::string problem = BucketProblem(out.bucket); !problem.empty()) {
    return Status::InvalidArgument(shown + ": " + problem);
  }
  out.key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (std::string problem = KeyProblem(out.key); !problem.empty()) {
    return Status::InvalidArgument(shown + ": " + problem);
  }
  if (!out.IsDirectory() && !LooksLikeWeightsFile(out.key.substr(out.key.rfind('/') + 1))) {
    out.key += '/';
  }
  return out;
}

std::string S3Encode(std::string_view text, bool keep_slash) {
  if (!keep_slash) return EncodeUrlSegment(text);
  // A key's '/' separate segments of the canonical path, each encoded on its own.
  std::string out;
  for (size_t start = 0;;) {
    const size_t slash = text.find('/', start);
    out += EncodeUrlSegment(text.substr(start, slash - start));
    if (slash == std::string_view::npos) return out;
    out += '/';
    start = slash + 1;
  }
}

std::string S3Target::ObjectUrl(std::string_view key) const {
  return base + (virtual_host ? "/" : "/" + bucket + "/") + S3Encode(key, true);
}

std::string S3Target::ListUrl(std::string_view prefix, std::string_view token) const {
  // Parameters sorted by name: the canonical query SigV4 signs (libcurl signs it as given).
  std::string query;
  if (!token.empty()) query += "continuation-token=" + S3Encode(token, false) + "&";
  query += "delimiter=%2F&list-type=2&prefix=" + S3Encode(prefix, false);
  return base + (virtual_host ? "/" : "/" + bucket) + "?" + query;
}

IniFile ParseIni(std::string_view text) {
  IniFile ini;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == ' ' || line[0] == '\t') continue;  // nested settings
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t[0] == '[') {
      if (t.back() != ']') continue;
      std::string name = Trim(std::string_view(t).substr(1, t.size() - 2));
      // "[profile  x]" names profile "x" whatever the spacing.
      if (StartsWith(name, "profile ")) name = "profile " + Trim(name.substr(8));
      ini.push_back({name, {}});
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos || ini.empty()) continue;
    ini.back().second.push_back({Trim(t.substr(0, eq)), Trim(t.substr(eq + 1))});
  }
  return ini;
}

Result<S3Target> ResolveS3(const S3Url& url, const RemoteOptions& remote, const EnvLookup& env) {
  const std::string shown = url.ToString();
  const std::string home = Env(env, "HOME");
  std::string credentials_path = Env(env, "AWS_SHARED_CREDENTIALS_FILE");
  std::string config_path = Env(env, "AWS_CONFIG_FILE");
  if (credentials_path.empty() && !home.empty()) credentials_path = home + "/.aws/credentials";
  if (config_path.empty() && !home.empty()) config_path = home + "/.aws/config";
  std::string text;
  const IniFile credentials_file =
      !credentials_path.empty() && ReadFile(credentials_path, &text) ? ParseIni(text) : IniFile{};
  text.clear();
  const IniFile config_file =
      !config_path.empty() && ReadFile(config_path, &text) ? ParseIni(text) : IniFile{};

  std::string profile = Env(env, "AWS_PROFILE");
  const bool profile_named = !profile.empty();
  if (!profile_named) profile = "default";

  S3Target target;
  target.bucket = url.bucket;
  target.http = remote.http;
  AwsSigning& sig = target.http.sigv4;
  sig.region = remote.s3.region;
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (sig.region.empty()) sig.region = Env(env, name);
  }
  if (sig.region.empty()) {
    sig.region = Value(ConfigSection(config_file, profile), "region");
  }
  if (sig.region.empty()) sig.region = kDefaultRegion;
  if (!ValidRegion(sig.region)) {
    return Status::InvalidArgument("S3 region '" + sig.region +
                                   "': expected lower-case letters, digits and '-' (for " + shown +
                                   ")");
  }
  CKPTFS_ASSIGN_OR_RETURN(Credentials c, FindCredentials(env, credentials_file, config_file,
                                                         profile, profile_named, shown));
  if (std::any_of(c.token.begin(), c.token.end(), IsControl) ||
      std::any_of(c.key.begin(), c.key.end(), IsControl)) {
    return Status::InvalidArgument("AWS credentials hold control characters (for " + shown + ")");
  }
  sig.access_key = std::move(c.key);
  sig.secret_key = std::move(c.secret);
  sig.session_token = std::move(c.token);

  std::string endpoint = remote.s3.endpoint;
  for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    if (endpoint.empty()) endpoint = Env(env, name);
  }
  using Addressing = S3Options::Addressing;
  const Addressing addressing = remote.s3.addressing;
  if (endpoint.empty()) {
    // AWS: virtual host unless the bucket name has dots, which TLS wildcard certificates
    // (*.s3.REGION.amazonaws.com) do not cover.
    target.virtual_host =
        addressing == Addressing::kVirtualHost ||
        (addressing == Addressing::kAuto && url.bucket.find('.') == std::string::npos);
    target.base = "https://" + (target.virtual_host ? url.bucket + "." : std::string()) + "s3." +
                  sig.region + ".amazonaws.com";
    return target;
  }
  CKPTFS_ASSIGN_OR_RETURN(Endpoint e, ParseEndpoint(endpoint, shown));
  target.virtual_host = addressing == Addressing::kVirtualHost;
  if (target.virtual_host) {
    const std::string host = HostName(e.host);
    if (host.front() == '[' || IsIpv4(host)) {
      return Status::InvalidArgument("S3 endpoint " + RedactedUrl(endpoint) +
                                     ": virtual-host addressing needs a host name, not an IP "
                                     "address (use --addressing path; for " +
                                     shown + ")");
    }
    target.base = e.scheme + url.bucket + "." + e.host + e.path;
  } else {
    target.base = e.scheme + e.host + e.path;
  }
  return target;
}

Result<S3ListPage> ParseListObjectsV2(std::string_view xml, const std::string& shown_url) {
  const std::string bad = shown_url + ": malformed listing: ";
  tinyxml2::XMLDocument doc(/*processEntities=*/true, tinyxml2::PRESERVE_WHITESPACE);
  if (doc.Parse(xml.data(), xml.size()) != tinyxml2::XML_SUCCESS) {
    return Status::Corruption(bad + "not XML (" + doc.ErrorName() + " at line " +
                              std::to_string(doc.ErrorLineNum()) + ")");
  }
  if (!EntitiesWellFormed(xml)) return Status::Corruption(bad + "not XML (a bare '&')");
  const tinyxml2::XMLElement* root = doc.RootElement();
  if (root == nullptr || std::string_view(root->Name()) != "ListBucketResult") {
    return Status::Corruption(bad + "no ListBucketResult");
  }
  S3ListPage page;
  bool duplicate = false;
  std::string text;
  const tinyxml2::XMLElement* truncated = OnlyChild(root, "IsTruncated", &duplicate);
  if (truncated == nullptr || duplicate || !TextOf(truncated, &text) ||
      (text != "true" && text != "false")) {
    return Status::Corruption(bad + "IsTruncated is not one true or false");
  }
  page.truncated = text == "true";
  if (page.truncated) {
    const tinyxml2::XMLElement* next = OnlyChild(root, "NextContinuationToken", &duplicate);
    if (next == nullptr || duplicate || !TextOf(next, &page.next_token) ||
        page.next_token.empty() || page.next_token.size() > kMaxTokenBytes) {
      return Status::Corruption(bad + "truncated without one NextContinuationToken");
    }
  }
  for (const tinyxml2::XMLElement* c = root->FirstChildElement("Contents"); c != nullptr;
       c = c->NextSiblingElement("Contents")) {
    S3Object object;
    const tinyxml2::XMLElement* key = OnlyChild(c, "Key", &duplicate);
    if (key == nullptr || duplicate || !TextOf(key, &object.key) || object.key.empty()) {
      return Status::Corruption(bad + "an entry without one Key");
    }
    const tinyxml2::XMLElement* size = OnlyChild(c, "Size", &duplicate);
    if (size == nullptr || duplicate || !TextOf(size, &text) || !ParseSize(text, &object.size)) {
      return Status::Corruption(bad + "entry " + object.key.substr(0, 200) +
                                " has no decimal Size below 2^63");
    }
    if (const tinyxml2::XMLElement* etag = OnlyChild(c, "ETag", &duplicate);
        etag != nullptr && (duplicate || !TextOf(etag, &object.etag) ||
                            std::any_of(object.etag.begin(), object.etag.end(), IsControl))) {
      return Status::Corruption(bad + "entry " + object.key.substr(0, 200) + " has a bad ETag");
    }
    if (const tinyxml2::XMLElement* modified = OnlyChild(c, "LastModified", &duplicate);
        modified != nullptr && !duplicate && TextOf(modified, &text)) {
      object.last_modified = ParseIsoTime(text);
    }
    page.objects.push_back(std::move(object));
  }
  for (const tinyxml2::XMLElement* c = root->FirstChildElement("CommonPrefixes"); c != nullptr;
       c = c->NextSiblingElement("CommonPrefixes")) {
    const tinyxml2::XMLElement* prefix = OnlyChild(c, "Prefix", &duplicate);
    if (prefix == nullptr || duplicate || !TextOf(prefix, &text) || text.empty()) {
      return Status::Corruption(bad + "CommonPrefixes without one Prefix");
    }
    page.prefixes.push_back(text);
  }
  return page;
}

std::string S3ErrorCode(std::string_view xml) {
  tinyxml2::XMLDocument doc;
  if (doc.Parse(xml.data(), xml.size()) != tinyxml2::XML_SUCCESS) return "";
  const tinyxml2::XMLElement* root = doc.RootElement();
  if (root == nullptr || std::string_view(root->Name()) != "Error") return "";
  const tinyxml2::XMLElement* code = root->FirstChildElement("Code");
  std::string text;
  if (code == nullptr || !TextOf(code, &text)) return "";
  // Codes are short words; anything else is not shown.
  if (text.size() > 64 ||
      text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.") !=
          std::string::npos) {
    return "";
  }
  return text;
}

Result<std::vector<S3Object>> ListS3(const S3Target& target, const S3Url& url,
                                     std::vector<std::string>* prefixes) {
  const std::string shown = url.ToString();
  std::vector<S3Object> objects;
  std::string token;
  for (;;) {
    CKPTFS_ASSIGN_OR_RETURN(HttpResponse response, HttpGet(target.ListUrl(url.key, token), shown,
                                                           target.http, kMaxListingBytes));
    if (response.status != 200) return ListingError(target, url, response);
    CKPTFS_ASSIGN_OR_RETURN(S3ListPage page, ParseListObjectsV2(response.body, shown));
    if (objects.size() + page.objects.size() > kMaxListedObjects) {
      return Status::Unsupported(shown + ": more than " + std::to_string(kMaxListedObjects) +
                                 " objects under the prefix");
    }
    std::move(page.objects.begin(), page.objects.end(), std::back_inserter(objects));
    if (prefixes) {
      if (prefixes->size() + page.prefixes.size() > kMaxListedObjects) {
        return Status::Unsupported(shown + ": more than " + std::to_string(kMaxListedObjects) +
                                   " subdirectories under the prefix");
      }
      std::move(page.prefixes.begin(), page.prefixes.end(), std::back_inserter(*prefixes));
    }
    if (!page.truncated) return objects;
    // A server that hands back the token it was given would page forever.
    if (page.next_token == token) {
      return Status::Corruption(shown + ": malformed listing: the continuation token repeats");
    }
    token = std::move(page.next_token);
  }
}

std::vector<std::pair<std::string, S3Object>> S3CheckpointFiles(const std::string& prefix,
                                                                std::vector<S3Object> objects) {
  std::vector<std::pair<std::string, S3Object>> files;
  for (S3Object& o : objects) {
    if (!StartsWith(o.key, prefix)) continue;
    std::string name = o.key.substr(prefix.size());
    // UrlNameProblem also refuses names that percent-decode to one of these ("..%2Fx"),
    // for servers that decode keys.
    if (name.size() > kMaxNameBytes || !UrlNameProblem(name).empty()) {
      continue;
    }
    files.emplace_back(std::move(name), std::move(o));
  }
  std::stable_sort(files.begin(), files.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // A listing naming one key twice: the first wins.
  files.erase(std::unique(files.begin(), files.end(),
                          [](const auto& a, const auto& b) { return a.first == b.first; }),
              files.end());
  return files;
}

std::vector<std::string> S3SubdirectoryNames(const std::string& prefix,
                                             const std::vector<std::string>& prefixes) {
  std::vector<std::string> names;
  for (const std::string& p : prefixes) {
    if (!StartsWith(p, prefix) || !EndsWith(p, "/")) continue;
    std::string name = p.substr(prefix.size(), p.size() - prefix.size() - 1);
    if (name.size() > kMaxNameBytes || !UrlNameProblem(name).empty()) continue;
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace ckptfs
