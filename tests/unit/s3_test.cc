// S3 sources without a server: URL parsing, addressing, key encoding, credentials and
// region from the environment and ~/.aws files, and ListObjectsV2 answers, hostile ones
// included. The real requests (signing, ranges, listings) are in tests/mount/s3_mount_test.cc.
#include "core/source/s3.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/source/http_source.h"

namespace ckptfs {
namespace {

// An environment of exactly these variables.
struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup Lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

// A scratch HOME with ~/.aws, removed at the end.
class TempHome {
 public:
  TempHome() {
    std::string templ = (std::filesystem::temp_directory_path() / "ckptfs_s3_test.XXXXXX").string();
    path_ = ::mkdtemp(templ.data());
    std::filesystem::create_directories(path_ + "/.aws");
  }
  ~TempHome() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  void Write(const std::string& relative, const std::string& text) const {
    std::ofstream(path_ + "/" + relative) << text;
  }

 private:
  std::string path_;
};

S3Url Url(const std::string& text) {
  auto url = ParseS3Url(text);
  EXPECT_TRUE(url.ok()) << url.status().message();
  return url.ok() ? *url : S3Url{};
}

// ---------------------------------------------------------------------------
// URLs

TEST(S3Url, ParsesBucketAndKey) {
  S3Url u = Url("s3://bucket/llama/");
  EXPECT_EQ(u.bucket, "bucket");
  EXPECT_EQ(u.key, "llama/");
  EXPECT_TRUE(u.IsDirectory());
  EXPECT_EQ(u.ToString(), "s3://bucket/llama/");

  u = Url("s3://bucket/llama/model.safetensors");
  EXPECT_EQ(u.key, "llama/model.safetensors");
  EXPECT_FALSE(u.IsDirectory());
  EXPECT_FALSE(Url("s3://bucket/a/b/pytorch_model.bin.zst").IsDirectory());

  // The bucket itself, with or without the slash.
  EXPECT_EQ(Url("s3://my-bucket.v2").key, "");
  EXPECT_TRUE(Url("s3://my-bucket.v2/").IsDirectory());
  // No trailing slash and no weights-file name: a directory.
  EXPECT_EQ(Url("s3://bucket/llama").key, "llama/");
  EXPECT_EQ(Url("s3://bucket/runs/step-100").key, "runs/step-100/");
  // Keys are raw, not percent-decoded: any printable byte goes.
  EXPECT_EQ(Url("s3://bucket/my model+v1 (final)/").key, "my model+v1 (final)/");
  EXPECT_EQ(Url("s3://bucket/a%20b/").key, "a%20b/");
}

TEST(S3Url, RefusesWithOneLineNamingTheUrl) {
  const char* bad[] = {
      "s3://",                 // no bucket
      "s3:///llama/",          // empty bucket
      "s3://ab/",              // too short
      "s3://Bucket/",          // upper case
      "s3://my_bucket/",       // underscore
      "s3://-bucket/",         // starts with '-'
      "s3://bucket-/",         // ends with '-'
      "s3://my..bucket/",      // adjacent dots
      "s3://192.168.1.10/",    // IP address
      "s3://xn--bucket/",      // reserved prefix
      "s3://bucket-s3alias/",  // reserved suffix
      "s3://bucket/a/../b/",   // '..' segment
      "s3://bucket/../",       // '..' segment
      "s3://bucket/./x/",      // '.' segment
      "s3://bucket/a//b/",     // empty segment
      "s3://bucket//",         // empty segment
      "s3://bucket/a\nb/",     // control character
      "s3://bucket/a\tb/",     // control character
  };
  for (const char* text : bad) {
    SCOPED_TRACE(text);
    auto url = ParseS3Url(text);
    ASSERT_FALSE(url.ok());
    EXPECT_EQ(url.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(url.status().message().find('\n', url.status().message().find(": ")),
              std::string::npos);
    EXPECT_EQ(url.status().message().rfind("s3://", 0), 0u) << url.status().message();
  }
  EXPECT_FALSE(ParseS3Url("s3://" + std::string(64, 'a') + "/").ok());
  EXPECT_TRUE(ParseS3Url("s3://" + std::string(63, 'a') + "/").ok());
  EXPECT_FALSE(ParseS3Url("s3://bucket/" + std::string(1025, 'k')).ok());
  EXPECT_FALSE(ParseS3Url("http://bucket/").ok());
  EXPECT_FALSE(IsS3Url("S3://bucket/"));
  EXPECT_TRUE(IsS3Url("s3://bucket/"));
}

TEST(S3Url, CredentialsInTheUrlAreRefusedAndNeverShown) {
  auto url = ParseS3Url("s3://AKIDEXAMPLE:hunter2secret@bucket/llama/");
  ASSERT_FALSE(url.ok());
  EXPECT_EQ(url.status().message().find("hunter2secret"), std::string::npos)
      << url.status().message();
  EXPECT_EQ(url.status().message().find("AKIDEXAMPLE"), std::string::npos)
      << url.status().message();
  EXPECT_NE(url.status().message().find("s3://bucket/llama/"), std::string::npos)
      << url.status().message();
}

TEST(S3Encode, FollowsSigV4CanonicalRules) {
  EXPECT_EQ(S3Encode("AZaz09-_.~", false), "AZaz09-_.~");
  EXPECT_EQ(S3Encode("a b+c=d&e/f", true), "a%20b%2Bc%3Dd%26e/f");
  EXPECT_EQ(S3Encode("a b+c=d&e/f", false), "a%20b%2Bc%3Dd%26e%2Ff");
  EXPECT_EQ(S3Encode("é*!'()%", true), "%C3%A9%2A%21%27%28%29%25");
  EXPECT_EQ(S3Encode(std::string("\x7f\xff", 2), true), "%7F%FF");
}

// ---------------------------------------------------------------------------
// Where requests go

RemoteOptions WithEndpoint(std::string endpoint,
                           S3Options::Addressing addressing = S3Options::Addressing::kAuto) {
  RemoteOptions r;
  r.s3.endpoint = std::move(endpoint);
  r.s3.addressing = addressing;
  return r;
}

TEST(ResolveS3, AwsUsesVirtualHostsUnlessTheBucketHasDots) {
  FakeEnv env;
  auto t = ResolveS3(Url("s3://bucket/llama/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->http.sigv4.region, "us-east-1");
  EXPECT_EQ(t->ObjectUrl("llama/model.safetensors"),
            "https://bucket.s3.us-east-1.amazonaws.com/llama/model.safetensors");
  EXPECT_EQ(t->ListUrl("llama/", ""),
            "https://bucket.s3.us-east-1.amazonaws.com/"
            "?delimiter=%2F&list-type=2&prefix=llama%2F");

  env.vars["AWS_REGION"] = "eu-west-3";
  t = ResolveS3(Url("s3://my.dotted.bucket/x/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ObjectUrl("x/a b.json"),
            "https://s3.eu-west-3.amazonaws.com/my.dotted.bucket/x/a%20b.json");

  RemoteOptions path;
  path.s3.addressing = S3Options::Addressing::kPath;
  t = ResolveS3(Url("s3://bucket/x/"), path, env.Lookup());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ObjectUrl("x/y"), "https://s3.eu-west-3.amazonaws.com/bucket/x/y");
}

TEST(ResolveS3, EndpointMeansPathStyle) {
  FakeEnv env;
  auto t =
      ResolveS3(Url("s3://bucket/llama/"), WithEndpoint("http://127.0.0.1:9000/"), env.Lookup());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_FALSE(t->virtual_host);
  EXPECT_EQ(t->ObjectUrl("llama/model-00001.safetensors"),
            "http://127.0.0.1:9000/bucket/llama/model-00001.safetensors");
  EXPECT_EQ(t->ListUrl("llama/", "1/a+b="),
            "http://127.0.0.1:9000/bucket"
            "?continuation-token=1%2Fa%2Bb%3D&delimiter=%2F&list-type=2&prefix=llama%2F");
  // A base path is kept.
  t = ResolveS3(Url("s3://bucket/"), WithEndpoint("https://store.example/s3"), env.Lookup());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ObjectUrl("k"), "https://store.example/s3/bucket/k");
  EXPECT_EQ(t->ListUrl("", ""),
            "https://store.example/s3/bucket?delimiter=%2F&list-type=2&prefix=");
}

TEST(ResolveS3, VirtualHostWithAnEndpoint) {
  FakeEnv env;
  auto t = ResolveS3(Url("s3://bkt/p/"),
                     WithEndpoint("http://s3.localhost:4568", S3Options::Addressing::kVirtualHost),
                     env.Lookup());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->ObjectUrl("p/x.json"), "http://bkt.s3.localhost:4568/p/x.json");
  EXPECT_EQ(t->ListUrl("p/", ""),
            "http://bkt.s3.localhost:4568/?delimiter=%2F&list-type=2&prefix=p%2F");
  // An IP address has no subdomains.
  t = ResolveS3(Url("s3://bkt/p/"),
                WithEndpoint("http://127.0.0.1:4568", S3Options::Addressing::kVirtualHost),
                env.Lookup());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--addressing path"), std::string::npos);
}

TEST(ResolveS3, EndpointFromEnvironmentAndBadEndpoints) {
  FakeEnv env;
  env.vars["AWS_ENDPOINT_URL"] = "http://general:1";
  auto t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->base, "http://general:1");
  env.vars["AWS_ENDPOINT_URL_S3"] = "http://s3only:2";
  t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->base, "http://s3only:2");
  t = ResolveS3(Url("s3://bucket/"), WithEndpoint("http://flag:3"), env.Lookup());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->base, "http://flag:3");

  for (const char* bad : {"ftp://x", "127.0.0.1:9000", "http://", "http://a/b?c=d",
                          "http://user:pw-in-endpoint@host/"}) {
    SCOPED_TRACE(bad);
    t = ResolveS3(Url("s3://bucket/"), WithEndpoint(bad), env.Lookup());
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(t.status().message().find("pw-in-endpoint"), std::string::npos)
        << t.status().message();
  }
}

TEST(ResolveS3, RegionPrecedence) {
  TempHome home;
  home.Write(".aws/config", "[default]\nregion = ap-south-1\n[profile other]\nregion=sa-east-1\n");
  FakeEnv env;
  env.vars["HOME"] = home.path();
  auto region = [&](RemoteOptions r = {}) {
    auto t = ResolveS3(Url("s3://bucket/"), r, env.Lookup());
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? t->http.sigv4.region : "";
  };
  EXPECT_EQ(region(), "ap-south-1");
  env.vars["AWS_PROFILE"] = "other";
  EXPECT_EQ(region(), "sa-east-1");
  env.vars["AWS_DEFAULT_REGION"] = "us-west-1";
  EXPECT_EQ(region(), "us-west-1");
  env.vars["AWS_REGION"] = "us-west-2";
  EXPECT_EQ(region(), "us-west-2");
  RemoteOptions flag;
  flag.s3.region = "eu-central-1";
  EXPECT_EQ(region(flag), "eu-central-1");
  flag.s3.region = "eu central:1";
  EXPECT_FALSE(ResolveS3(Url("s3://bucket/"), flag, env.Lookup()).ok());
}

// ---------------------------------------------------------------------------
// Credentials

constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

TEST(ResolveS3, CredentialsFromTheEnvironment) {
  FakeEnv env;
  env.vars["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  env.vars["AWS_SECRET_ACCESS_KEY"] = kSecret;
  env.vars["AWS_SESSION_TOKEN"] = "token/with+chars=";
  auto t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->http.sigv4.access_key, "AKIDENV");
  EXPECT_EQ(t->http.sigv4.secret_key, kSecret);
  EXPECT_EQ(t->http.sigv4.session_token, "token/with+chars=");

  // Half a pair is a mistake worth saying, without the half that is there.
  env.vars.erase("AWS_ACCESS_KEY_ID");
  t = ResolveS3(Url("s3://bucket/llama/"), {}, env.Lookup());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().find(kSecret), std::string::npos);
  EXPECT_NE(t.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  EXPECT_NE(t.status().message().find("s3://bucket/llama/"), std::string::npos);

  env.vars["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  env.vars["AWS_SESSION_TOKEN"] = "bad\r\nX-Injected: 1";
  t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().find("Injected"), std::string::npos);
}

TEST(ResolveS3, CredentialsFromProfiles) {
  TempHome home;
  home.Write(".aws/credentials",
             "# comment\r\n[default]\r\naws_access_key_id = AKIDDEFAULT\r\n"
             "aws_secret_access_key = secret-default\r\n\r\n"
             "[  work ]\naws_access_key_id=AKIDWORK\naws_secret_access_key=" +
                 std::string(kSecret) +
                 "\naws_session_token = tok\n  nested = ignored\n"
                 "[half]\naws_access_key_id = AKIDHALF\n");
  home.Write(".aws/config",
             "[profile fromconfig]\naws_access_key_id = AKIDCONFIG\n"
             "aws_secret_access_key = secret-config\nregion = eu-north-1\n");
  FakeEnv env;
  env.vars["HOME"] = home.path();
  auto t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->http.sigv4.access_key, "AKIDDEFAULT");
  EXPECT_EQ(t->http.sigv4.secret_key, "secret-default");
  EXPECT_EQ(t->http.sigv4.session_token, "");

  env.vars["AWS_PROFILE"] = "work";
  t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->http.sigv4.access_key, "AKIDWORK");
  EXPECT_EQ(t->http.sigv4.secret_key, kSecret);
  EXPECT_EQ(t->http.sigv4.session_token, "tok");

  env.vars["AWS_PROFILE"] = "fromconfig";
  t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->http.sigv4.access_key, "AKIDCONFIG");
  EXPECT_EQ(t->http.sigv4.region, "eu-north-1");

  env.vars["AWS_PROFILE"] = "half";
  t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("half"), std::string::npos);

  env.vars["AWS_PROFILE"] = "nosuch";
  t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nosuch"), std::string::npos);

  // AWS_SHARED_CREDENTIALS_FILE replaces ~/.aws/credentials.
  home.Write("other-credentials",
             "[nosuch]\naws_access_key_id=AKIDOTHER\n"
             "aws_secret_access_key=other\n");
  env.vars["AWS_SHARED_CREDENTIALS_FILE"] = home.path() + "/other-credentials";
  t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->http.sigv4.access_key, "AKIDOTHER");

  // The environment wins over any profile.
  env.vars["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  env.vars["AWS_SECRET_ACCESS_KEY"] = "env-secret";
  t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->http.sigv4.access_key, "AKIDENV");
}

TEST(ResolveS3, NoCredentialsMeansAnonymous) {
  TempHome home;  // an empty ~/.aws
  FakeEnv env;
  env.vars["HOME"] = home.path();
  auto t = ResolveS3(Url("s3://bucket/"), {}, env.Lookup());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->http.sigv4.access_key, "");
  // No HOME at all: still anonymous, not an error.
  FakeEnv bare;
  EXPECT_TRUE(ResolveS3(Url("s3://bucket/"), {}, bare.Lookup()).ok());
}

TEST(ParseIni, SectionsCommentsAndNesting) {
  IniFile ini = ParseIni(
      "top = ignored\n; c\n# c\n[a]\nk = v = w\n  sub = skipped\n\tsub2 = skipped\n"
      "[profile   x ]\nregion=r\n[broken\nq=1\n");
  ASSERT_EQ(ini.size(), 2u);
  EXPECT_EQ(ini[0].first, "a");
  ASSERT_EQ(ini[0].second.size(), 1u);
  EXPECT_EQ(ini[0].second[0], (std::pair<std::string, std::string>{"k", "v = w"}));
  EXPECT_EQ(ini[1].first, "profile x");
  // "[broken" is no section: q=1 stays in [profile x].
  EXPECT_EQ(ini[1].second.size(), 2u);
}

// ---------------------------------------------------------------------------
// Listings

constexpr char kShown[] = "s3://bkt/llama/";

std::string Listing(const std::string& contents, const std::string& tail = "") {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
         "<Name>bkt</Name><Prefix>llama/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>"
         "<Delimiter>/</Delimiter>" +
         tail + contents + "</ListBucketResult>";
}

std::string Entry(const std::string& key, const std::string& size,
                  const std::string& etag = "&quot;0123abcd&quot;") {
  return "<Contents><Key>" + key +
         "</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
         "<ETag>" +
         etag + "</ETag><Size>" + size +
         "</Size><StorageClass>STANDARD</StorageClass>"
         "</Contents>";
}

// LastModified only dates the files a mount shows: one that is not ISO 8601 UTC leaves the
// date unknown (0) and the listing valid.
TEST(ParseListObjectsV2, LastModifiedDatesObjects) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"2024-05-01T12:30:15Z", 1714566615},
      {"2024-05-01T12:30:15.123Z", 1714566615},
      {"2024-05-01T12:30:15+02:00", 0},
      {"yesterday", 0},
      {"", 0},
  };
  for (const auto& [text, seconds] : cases) {
    SCOPED_TRACE(text);
    auto page = ParseListObjectsV2(Listing("<Contents><Key>llama/c.json</Key><LastModified>" +
                                               text + "</LastModified><Size>1</Size></Contents>",
                                           "<IsTruncated>false</IsTruncated>"),
                                   kShown);
    ASSERT_TRUE(page.ok()) << page.status().message();
    EXPECT_EQ(page->objects.at(0).last_modified, seconds);
  }
}

TEST(ParseListObjectsV2, ReadsEntriesAndPages) {
  auto page = ParseListObjectsV2(
      Listing(Entry("llama/config.json", "42") + Entry("llama/a &amp; b.json", "0", "") +
                  "<CommonPrefixes><Prefix>llama/sub/</Prefix></CommonPrefixes>",
              "<IsTruncated>false</IsTruncated>"),
      kShown);
  ASSERT_TRUE(page.ok()) << page.status().message();
  EXPECT_FALSE(page->truncated);
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "llama/config.json");
  EXPECT_EQ(page->objects[0].size, 42u);
  EXPECT_EQ(page->objects[0].etag, "\"0123abcd\"");
  EXPECT_EQ(page->objects[0].last_modified, 1704067200);  // 2024-01-01T00:00:00.000Z
  EXPECT_EQ(page->objects[1].key, "llama/a & b.json");
  EXPECT_EQ(page->objects[1].etag, "");

  page = ParseListObjectsV2(
      Listing(
          Entry("llama/ spaced ", "9223372036854775807"),
          "<IsTruncated>true</IsTruncated><NextContinuationToken>1ab/c+d=</NextContinuationToken>"),
      kShown);
  ASSERT_TRUE(page.ok()) << page.status().message();
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "1ab/c+d=");
  EXPECT_EQ(page->objects[0].key, "llama/ spaced ");  // whitespace is part of a key
  EXPECT_EQ(page->objects[0].size, 9223372036854775807u);

  // An empty prefix: no Contents at all.
  page = ParseListObjectsV2(Listing("", "<IsTruncated>false</IsTruncated>"), kShown);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->objects.empty());
}

TEST(ParseListObjectsV2, RefusesHostileAnswersNamingTheUrl) {
  const std::string ok_tail = "<IsTruncated>false</IsTruncated>";
  const std::string full = Listing(Entry("llama/x", "1"), ok_tail);
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"empty", ""},
      {"truncated document", full.substr(0, full.size() / 2)},
      {"not xml", "{\"Contents\": []}"},
      {"wrong root", "<Error><Code>AccessDenied</Code></Error>"},
      {"html", "<html><body>proxy login</body></html>"},
      {"no IsTruncated", Listing(Entry("llama/x", "1"))},
      {"IsTruncated yes", Listing("", "<IsTruncated>yes</IsTruncated>")},
      {"two IsTruncated", Listing("", ok_tail + ok_tail)},
      {"truncated without token", Listing("", "<IsTruncated>true</IsTruncated>")},
      {"empty token",
       Listing("",
               "<IsTruncated>true</IsTruncated><NextContinuationToken></NextContinuationToken>")},
      {"huge token", Listing("", "<IsTruncated>true</IsTruncated><NextContinuationToken>" +
                                     std::string(5000, 't') + "</NextContinuationToken>")},
      {"no key", Listing("<Contents><Size>1</Size></Contents>", ok_tail)},
      {"empty key", Listing(Entry("", "1"), ok_tail)},
      {"two keys", Listing("<Contents><Key>a</Key><Key>b</Key><Size>1</Size></Contents>", ok_tail)},
      {"element in key", Listing(Entry("<b>x</b>", "1"), ok_tail)},
      {"no size", Listing("<Contents><Key>llama/x</Key></Contents>", ok_tail)},
      {"size text", Listing(Entry("llama/x", "big"), ok_tail)},
      {"size negative", Listing(Entry("llama/x", "-1"), ok_tail)},
      {"size fraction", Listing(Entry("llama/x", "1.5"), ok_tail)},
      {"size spaced", Listing(Entry("llama/x", " 1"), ok_tail)},
      {"size empty", Listing(Entry("llama/x", ""), ok_tail)},
      {"size 2^63", Listing(Entry("llama/x", "9223372036854775808"), ok_tail)},
      {"size 2^64", Listing(Entry("llama/x", "18446744073709551616"), ok_tail)},
      {"size huge", Listing(Entry("llama/x", std::string(400, '9')), ok_tail)},
      {"two sizes",
       Listing("<Contents><Key>k</Key><Size>1</Size><Size>2</Size></Contents>", ok_tail)},
      {"two etags", Listing("<Contents><Key>k</Key><Size>1</Size><ETag>a</ETag><ETag>b</ETag>"
                            "</Contents>",
                            ok_tail)},
      {"unclosed entity", Listing(Entry("llama/a &amp b", "1"), ok_tail)},
      {"undefined entity", Listing(Entry("llama/&nbsp;", "1"), ok_tail)},
  };
  for (const auto& [what, xml] : cases) {
    SCOPED_TRACE(what);
    auto page = ParseListObjectsV2(xml, kShown);
    ASSERT_FALSE(page.ok());
    EXPECT_EQ(page.status().code(), Status::Code::kCorruption);
    EXPECT_EQ(page.status().message().rfind(std::string(kShown) + ": malformed listing", 0), 0u)
        << page.status().message();
    EXPECT_EQ(page.status().message().find('\n'), std::string::npos) << page.status().message();
  }
}

TEST(S3ErrorCode, ReadsTheCodeOnly) {
  EXPECT_EQ(S3ErrorCode("<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code>"
                        "<Message>The specified bucket does not exist</Message></Error>"),
            "NoSuchBucket");
  EXPECT_EQ(S3ErrorCode("<Error><Code>Bad code with spaces</Code></Error>"), "");
  EXPECT_EQ(S3ErrorCode("<ListBucketResult/>"), "");
  EXPECT_EQ(S3ErrorCode("not xml"), "");
  EXPECT_EQ(S3ErrorCode(""), "");
}

TEST(S3CheckpointFiles, KeepsOnlySafeNamesDirectlyUnderThePrefix) {
  std::vector<S3Object> objects;
  for (const char* key :
       {"llama/", "llama/model.safetensors", "llama/config.json", "llama/sub/x.json", "llama/..",
        "llama/.", "other/model.safetensors", "llamas/x", "llama/a\tb", "llama/model.safetensors",
        "llama/notes v1+final.txt"}) {
    objects.push_back({key, 1, "\"e\""});
  }
  objects.push_back({"llama/" + std::string(256, 'n'), 1, ""});
  objects.push_back({std::string("llama/nul\0x", 11), 1, ""});
  auto files = S3CheckpointFiles("llama/", objects);
  std::vector<std::string> names;
  for (const auto& [name, object] : files) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"config.json", "model.safetensors", "notes v1+final.txt"}));
  EXPECT_EQ(files[1].second.key, "llama/model.safetensors");

  // The bucket root: every key without '/'.
  files = S3CheckpointFiles("", objects);
  EXPECT_TRUE(files.empty());
  files = S3CheckpointFiles("", {{"model.safetensors", 3, ""}, {"a/b", 1, ""}});
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].first, "model.safetensors");
}

// ---------------------------------------------------------------------------
// Objects from a listing

TEST(HttpSourceFromListing, KnowsItsSizeAndIdentityWithoutARequest) {
  HttpOptions options;
  options.sigv4.access_key = "AKID";
  options.sigv4.secret_key = kSecret;
  // Port 9 (discard) on loopback: nothing is asked of it.
  auto source = HttpSource::FromListing("http://127.0.0.1:9/bkt/llama/model.safetensors",
                                        "model.safetensors", 1234, "\"abc-2\"", options);
  EXPECT_EQ(source->Size(), 1234u);
  EXPECT_EQ(source->Name(), "model.safetensors");
  EXPECT_EQ(source->Identity(), "http://127.0.0.1:9/bkt/llama/model.safetensors\n\"abc-2\"\n1234");
  EXPECT_EQ(source->Identity().find(kSecret), std::string::npos);
  // A weak ETag is no validator.
  auto weak = HttpSource::FromListing("http://u:p@h/k", "k", 5, "W/\"x\"", {});
  EXPECT_EQ(weak->Identity(), "http://h/k\n\n5");
}

}  // namespace
}  // namespace ckptfs
