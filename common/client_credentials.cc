#include "common/client_credentials.h"

#include <algorithm>
#include <utility>

namespace rkv {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

bool IsValidCredentialName(std::string_view name) {
  if (name.empty() || name.size() > ClientCredentials::kMaxNameBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

Status ClientCredentials::Add(std::string_view name, std::string_view token) {
  if (!IsValidCredentialName(name)) {
    return InvalidArgument("credential name \"" + std::string(name.substr(0, kMaxNameBytes + 1)) +
                           "\" is not 1 to " + std::to_string(kMaxNameBytes) + " characters of [A-Za-z0-9._-]");
  }
  if (token.empty()) return InvalidArgument("credential " + std::string(name) + " has an empty token");
  if (token.size() > kMaxTokenFileBytes) {
    return InvalidArgument("credential " + std::string(name) + "'s token is longer than " +
                           std::to_string(kMaxTokenFileBytes) + " bytes");
  }
  return AddDigest(name, TokenDigest(token));
}

Status ClientCredentials::AddDigest(std::string_view name, const Sha256Digest& digest) {
  if (!IsValidCredentialName(name)) {
    return InvalidArgument("credential name \"" + std::string(name.substr(0, kMaxNameBytes + 1)) +
                           "\" is not 1 to " + std::to_string(kMaxNameBytes) + " characters of [A-Za-z0-9._-]");
  }
  if (credentials_.size() >= kMaxCredentials) {
    return InvalidArgument("more than " + std::to_string(kMaxCredentials) + " credentials");
  }
  for (const Credential& c : credentials_) {
    if (c.name == name) return InvalidArgument("credential name " + std::string(name) + " is given twice");
    if (DigestEqual(c.digest.data(), digest.data(), digest.size())) {
      return InvalidArgument("credential " + std::string(name) + " has the token of credential " + c.name);
    }
  }
  credentials_.push_back({std::string(name), digest});
  return Status::Ok();
}

StatusOr<ClientCredentials> ClientCredentials::Parse(std::string_view text, std::string_view origin,
                                                     std::string_view own_name, std::string* own_token) {
  ClientCredentials out;
  bool own_found = false;
  // The line each credential came from, for a duplicate's message.
  std::vector<size_t> line_of;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t end = text.find('\n');
    const std::string_view raw = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const std::string where = std::string(origin) + ":" + std::to_string(line_number) + ": ";
    const std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#') continue;
    size_t split = 0;
    while (split < line.size() && !IsBlank(line[split])) ++split;
    const std::string_view name = line.substr(0, split);
    const std::string_view token = Trim(line.substr(split));
    if (token.empty()) return InvalidArgument(where + "expected NAME TOKEN, found no token");
    for (char c : token) {
      const auto u = static_cast<unsigned char>(c);
      if (u <= ' ' || u == 0x7f) {
        return InvalidArgument(where + "credential " + std::string(name.substr(0, kMaxNameBytes + 1)) +
                               "'s token holds whitespace or a control character (expected NAME TOKEN)");
      }
    }
    if (Status s = out.Add(name, token); !s.ok()) {
      std::string message = where + s.message();
      // Name the earlier line of a duplicate.
      const Sha256Digest digest = TokenDigest(token);
      for (size_t i = 0; i < out.credentials_.size(); ++i) {
        const Credential& c = out.credentials_[i];
        if (c.name == name || DigestEqual(c.digest.data(), digest.data(), digest.size())) {
          message += " (first on line " + std::to_string(line_of[i]) + ")";
          break;
        }
      }
      return InvalidArgument(message);
    }
    line_of.push_back(line_number);
    if (own_token != nullptr && name == own_name) {
      own_token->assign(token);
      own_found = true;
    }
  }
  if (out.credentials_.empty()) return InvalidArgument(std::string(origin) + ": holds no credential");
  if (own_token != nullptr && !own_found) {
    return InvalidArgument(std::string(origin) + ": holds no credential named \"" +
                           std::string(own_name.substr(0, kMaxNameBytes + 1)) + "\"");
  }
  return out;
}

StatusOr<ClientCredentials> ClientCredentials::ReadFile(const std::string& path, std::string_view own_name,
                                                        std::string* own_token) {
  RKV_ASSIGN_OR_RETURN(std::string text, ReadFileAtMost(path, kMaxFileBytes + 1, "credentials file"));
  if (text.size() > kMaxFileBytes) {
    return InvalidArgument("credentials file " + path + " holds more than " + std::to_string(kMaxFileBytes) +
                           " bytes");
  }
  return Parse(text, path, own_name, own_token);
}

bool ClientCredentials::Holds(std::string_view token) const {
  const Sha256Digest digest = TokenDigest(token);
  bool found = false;
  for (const Credential& c : credentials_) found |= DigestEqual(c.digest.data(), digest.data(), digest.size());
  return found;
}

std::optional<ClientCredentials::Match> ClientCredentials::Find(const uint8_t* digest) const {
  // Every entry is compared, a match or not: the time does not depend on
  // which one matches.
  const Credential* found = nullptr;
  bool revoked = false;
  for (const Credential& c : credentials_) {
    if (DigestEqual(c.digest.data(), digest, c.digest.size()) && found == nullptr) found = &c;
  }
  for (const Credential& c : revoked_) {
    if (DigestEqual(c.digest.data(), digest, c.digest.size()) && found == nullptr) {
      found = &c;
      revoked = true;
    }
  }
  if (found == nullptr) return std::nullopt;
  return Match{found->name, revoked, found->digest};
}

std::optional<ClientCredentials::Match> ClientCredentials::FindByProof(
    const std::function<bool(const Sha256Digest&)>& proves) const {
  const Credential* found = nullptr;
  bool revoked = false;
  for (const Credential& c : credentials_) {
    if (proves(c.digest) && found == nullptr) found = &c;
  }
  for (const Credential& c : revoked_) {
    if (proves(c.digest) && found == nullptr) {
      found = &c;
      revoked = true;
    }
  }
  if (found == nullptr) return std::nullopt;
  return Match{found->name, revoked, found->digest};
}

bool ClientCredentials::Contains(std::string_view name, const Sha256Digest& digest) const {
  return std::any_of(credentials_.begin(), credentials_.end(), [&](const Credential& c) {
    return c.name == name && DigestEqual(c.digest.data(), digest.data(), digest.size());
  });
}

ClientCredentials ClientCredentials::Revoking(const ClientCredentials& previous) const {
  ClientCredentials out = *this;
  out.revoked_.clear();
  const auto held = [&](const Credential& c) {
    return std::any_of(credentials_.begin(), credentials_.end(), [&](const Credential& mine) {
      return DigestEqual(mine.digest.data(), c.digest.data(), c.digest.size());
    });
  };
  for (const Credential& c : previous.revoked_) {
    if (!held(c)) out.revoked_.push_back(c);
  }
  for (const Credential& c : previous.credentials_) {
    if (!held(c)) out.revoked_.push_back(c);
  }
  if (out.revoked_.size() > kMaxCredentials) {
    out.revoked_.erase(out.revoked_.begin(),
                       out.revoked_.begin() + static_cast<std::ptrdiff_t>(out.revoked_.size() - kMaxCredentials));
  }
  return out;
}

ClientCredentials::Change ClientCredentials::ChangeFrom(const ClientCredentials& before) const {
  Change change;
  for (const Credential& c : credentials_) {
    if (!before.Contains(c.name, c.digest)) change.added.push_back(c.name);
  }
  for (const Credential& c : before.credentials_) {
    if (!Contains(c.name, c.digest)) change.removed.push_back(c.name);
  }
  return change;
}

ClientCredentials::Change LiveClientCredentials::Replace(const ClientCredentials& next) {
  MutexLock lock(mu_);
  auto replacement = std::make_shared<const ClientCredentials>(next.Revoking(*current_));
  ClientCredentials::Change change = replacement->ChangeFrom(*current_);
  current_ = std::move(replacement);
  generation_.fetch_add(1, std::memory_order_release);
  return change;
}

StatusOr<ClientCredentials::Change> LiveClientCredentials::Reload(const std::string& token, const std::string& path,
                                                                  const std::vector<std::string>& other_roles,
                                                                  const ClientCredentials* servers) {
  RKV_ASSIGN_OR_RETURN(ClientCredentials next, LoadClientCredentials(token, path, other_roles, servers));
  return Replace(next);
}

std::string DescribeChange(const ClientCredentials::Change& change) {
  const auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (change.added.empty() && change.removed.empty()) return "no change";
  std::string out;
  if (!change.added.empty()) out = "added " + list(change.added);
  if (!change.removed.empty()) out += (out.empty() ? "removed " : "; removed ") + list(change.removed);
  return out;
}

StatusOr<ClientCredentials> LoadClientCredentials(const std::string& token, const std::string& path,
                                                  const std::vector<std::string>& other_roles,
                                                  const ClientCredentials* servers) {
  ClientCredentials out;
  if (!token.empty()) RKV_RETURN_IF_ERROR(out.Add(kTokenFileCredentialName, token));
  if (!path.empty()) {
    RKV_ASSIGN_OR_RETURN(ClientCredentials file, ClientCredentials::ReadFile(path));
    for (const ClientCredentials::Credential& c : file.credentials()) {
      if (c.name == kTokenFileCredentialName && !token.empty()) {
        return InvalidArgument(path + ": the name \"" + std::string(kTokenFileCredentialName) +
                               "\" is --token_file's credential");
      }
      if (out.Find(c.digest.data())) {
        return InvalidArgument(path + ": credential " + c.name + " holds --token_file's token");
      }
      out.credentials_.push_back(c);
    }
  }
  if (out.credentials_.empty()) return InvalidArgument("no client credential");
  for (const std::string& other : other_roles) {
    if (other.empty()) continue;
    const Sha256Digest digest = TokenDigest(other);
    if (const auto match = out.Find(digest.data())) {
      return InvalidArgument("client credential " + match->name +
                             " is the cluster or the operator credential: those must be ones no client holds");
    }
  }
  if (servers != nullptr) {
    for (const ClientCredentials::Credential& c : out.credentials_) {
      if (const auto match = servers->Find(c.digest.data())) {
        return InvalidArgument("client credential " + c.name + " is server credential " + match->name +
                               ": a server's credential must be one no client holds");
      }
    }
  }
  return out;
}

}  // namespace rkv
