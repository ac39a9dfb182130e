// parse_source: the SOURCE forms of remote/source.h, with the endpoint and
// credentials each one reads from the environment and its files.
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "remote/http_client.h"
#include "remote/source.h"
#include "util/error.h"

namespace strata {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

std::optional<std::string> non_empty(const EnvLookup& env, const std::string& name) {
  auto v = env(name);
  if (v && !trim(*v).empty()) return trim(*v);
  return std::nullopt;
}

std::optional<std::string> read_trimmed(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream s;
  s << f.rdbuf();
  std::string t = trim(s.str());
  if (t.empty()) return std::nullopt;
  return t;
}

std::filesystem::path home(const EnvLookup& env) {
  const auto h = non_empty(env, "HOME");
  return h ? std::filesystem::path(*h) : std::filesystem::path();
}

// huggingface_hub's order: $HF_TOKEN (or the older $HUGGING_FACE_HUB_TOKEN),
// then the token file ($HF_TOKEN_PATH, else $HF_HOME/token, HF_HOME
// defaulting to $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface).
std::string hub_token(const EnvLookup& env) {
  if (auto t = non_empty(env, "HF_TOKEN")) return *t;
  if (auto t = non_empty(env, "HUGGING_FACE_HUB_TOKEN")) return *t;
  std::filesystem::path file;
  if (auto p = non_empty(env, "HF_TOKEN_PATH")) {
    file = *p;
  } else if (auto hf_home = non_empty(env, "HF_HOME")) {
    file = std::filesystem::path(*hf_home) / "token";
  } else if (auto xdg = non_empty(env, "XDG_CACHE_HOME")) {
    file = std::filesystem::path(*xdg) / "huggingface" / "token";
  } else if (!home(env).empty()) {
    file = home(env) / ".cache" / "huggingface" / "token";
  }
  if (file.empty()) return "";
  return read_trimmed(file).value_or("");
}

// One value of an INI file as the AWS tools write them: `[section]` lines,
// `key = value` lines, `#`/`;` comments.
std::optional<std::string> ini_value(const std::filesystem::path& file, const std::string& section,
                                     const std::string& key) {
  std::ifstream f(file);
  if (!f) return std::nullopt;
  std::string line, current;
  while (std::getline(f, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      current = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (current == section && eq != std::string::npos && trim(line.substr(0, eq)) == key) {
      std::string v = trim(line.substr(eq + 1));
      if (!v.empty()) return v;
    }
  }
  return std::nullopt;
}

bool valid_bucket(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '.' ||
          c == '-'))
      return false;
  return std::isalnum(static_cast<unsigned char>(b.front())) && std::isalnum(static_cast<unsigned char>(b.back()));
}

bool valid_repo_part(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

std::string without_trailing_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// Percent-encodes everything but RFC 3986's unreserved characters (and '/'
// when `keep_slash`).
std::string encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

SourceLocation parse_hub(const std::string& text, const EnvLookup& env) {
  SourceLocation l;
  l.kind = SourceLocation::Kind::Hub;
  l.text = text;
  std::string rest = text.substr(5);
  const size_t at = rest.find('@');
  l.revision = at == std::string::npos ? "main" : rest.substr(at + 1);
  l.repo = without_trailing_slashes(rest.substr(0, at));
  const size_t slash = l.repo.find('/');
  const bool parts_ok = slash == std::string::npos
                            ? valid_repo_part(l.repo)
                            : valid_repo_part(l.repo.substr(0, slash)) && valid_repo_part(l.repo.substr(slash + 1));
  if (!parts_ok)
    throw Error(text + ": not a hub repository (expected hf://ORG/REPO or hf://ORG/REPO@REVISION)");
  if (l.revision.empty() || l.revision.find("..") != std::string::npos)
    throw Error(text + ": the revision after '@' is empty or malformed");
  const std::string endpoint = without_trailing_slashes(non_empty(env, "HF_ENDPOINT").value_or("https://huggingface.co"));
  if (!endpoint.starts_with("http://") && !endpoint.starts_with("https://"))
    throw Error("HF_ENDPOINT=" + endpoint + ": not an http(s) URL");
  l.base = endpoint + "/" + l.repo + "/resolve/" + encode(l.revision, false);
  l.auth.bearer = hub_token(env);
  return l;
}

SourceLocation parse_s3(const std::string& text, const EnvLookup& env) {
  SourceLocation l;
  l.kind = SourceLocation::Kind::S3;
  l.text = text;
  const std::string rest = without_trailing_slashes(text.substr(5));
  const size_t slash = rest.find('/');
  const std::string bucket = rest.substr(0, slash);
  const std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (!valid_bucket(bucket)) throw Error(text + ": '" + bucket + "' is not an S3 bucket name");
  if (prefix.starts_with("/") || prefix.find("//") != std::string::npos) throw Error(text + ": the key prefix has an empty part ('//')");

  const std::string profile = non_empty(env, "AWS_PROFILE").value_or("default");
  const std::filesystem::path aws = home(env) / ".aws";
  const std::filesystem::path credentials =
      non_empty(env, "AWS_SHARED_CREDENTIALS_FILE").value_or((aws / "credentials").string());
  const std::filesystem::path config = non_empty(env, "AWS_CONFIG_FILE").value_or((aws / "config").string());
  const std::string config_section = profile == "default" ? "default" : "profile " + profile;

  const bool unsigned_requests = non_empty(env, "AWS_NO_SIGN_REQUEST").value_or("") == "true";
  if (!unsigned_requests) {
    auto key = non_empty(env, "AWS_ACCESS_KEY_ID"), secret = non_empty(env, "AWS_SECRET_ACCESS_KEY");
    std::optional<std::string> token = non_empty(env, "AWS_SESSION_TOKEN");
    if (!key || !secret) {
      key = ini_value(credentials, profile, "aws_access_key_id");
      secret = ini_value(credentials, profile, "aws_secret_access_key");
      token = ini_value(credentials, profile, "aws_session_token");
    }
    if (!key || !secret)
      throw Error(text + ": no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or profile '" +
                  profile + "' in " + credentials.string() + "; AWS_NO_SIGN_REQUEST=true for a public bucket)");
    l.auth.access_key = *key;
    l.auth.secret_key = *secret;
    l.auth.session_token = token.value_or("");
  }
  std::string region = non_empty(env, "AWS_REGION")
                           .value_or(non_empty(env, "AWS_DEFAULT_REGION")
                                         .value_or(ini_value(config, config_section, "region").value_or("us-east-1")));
  l.auth.region = region;
  const std::string key_prefix = prefix.empty() ? "" : "/" + encode(prefix, true);
  if (auto endpoint = non_empty(env, "AWS_ENDPOINT_URL_S3").value_or(non_empty(env, "AWS_ENDPOINT_URL").value_or(""));
      !endpoint.empty()) {
    endpoint = without_trailing_slashes(endpoint);
    if (!endpoint.starts_with("http://") && !endpoint.starts_with("https://"))
      throw Error("the S3 endpoint " + endpoint + " is not an http(s) URL");
    l.base = endpoint + "/" + bucket + key_prefix;
  } else if (bucket.find('.') != std::string::npos) {
    // A dotted name breaks the certificate of a virtual-hosted URL.
    l.base = "https://s3." + region + ".amazonaws.com/" + bucket + key_prefix;
  } else {
    l.base = "https://" + bucket + ".s3." + region + ".amazonaws.com" + key_prefix;
  }
  return l;
}

}  // namespace

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

bool is_remote_source(const std::string& text) {
  return text.starts_with("hf://") || text.starts_with("s3://") || text.starts_with("http://") ||
         text.starts_with("https://");
}

SourceLocation parse_source(const std::string& text, const EnvLookup& env) {
  if (text.ends_with(".gguf") && is_remote_source(text)) {
    const size_t slash = text.rfind('/');
    const std::string folder = text.substr(0, slash), file = text.substr(slash + 1);
    if (folder.ends_with("/") || folder.ends_with(":/") || file == ".gguf")
      throw Error(text + ": expected FOLDER/NAME.gguf");
    SourceLocation l = parse_source(folder, env);
    l.text = text;
    l.file = file;
    return l;
  }
  if (text.starts_with("hf://")) return parse_hub(text, env);
  if (text.starts_with("s3://")) return parse_s3(text, env);
  if (text.starts_with("http://") || text.starts_with("https://")) {
    SourceLocation l;
    l.kind = SourceLocation::Kind::Http;
    l.text = text;
    if (text.find_first_of("?#") != std::string::npos)
      throw Error(text + ": a source URL names a folder; it cannot carry a query or fragment");
    l.base = without_trailing_slashes(text);
    const size_t host = l.base.find("://") + 3;
    const std::string authority = l.base.substr(host, l.base.find('/', host) - host);
    if (authority.empty()) throw Error(text + ": no host");
    if (authority.find('@') != std::string::npos)
      throw Error(url_for_messages(text) + ": credentials in the URL are not accepted (they would be recorded in the pack)");
    return l;
  }
  throw Error(text + ": not a source (expected hf://ORG/REPO[@REVISION], http(s)://... or s3://BUCKET/PREFIX)");
}

std::string encode_file_path(const std::string& file) { return encode(file, true); }

}  // namespace strata
