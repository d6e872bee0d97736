// Named client credentials: the set of tokens clients may present, each
// with a name that logs and metrics show, so that one can be revoked
// (docs/design.md §10). The same set and file format hold the per-server
// credentials (--server_credentials_file): one per server, its NAME the
// server's name for the operator, which the coordinator binds server ids
// to.
//
// A credentials file (--client_credentials_file) holds one credential a
// line, `NAME TOKEN` (separated by spaces or tabs); `#` starts a comment
// line, blank lines are skipped. NAME is 1 to kMaxNameBytes characters of
// [A-Za-z0-9._-]; TOKEN follows the token file's rules (non-empty, at most
// kMaxTokenFileBytes, no whitespace inside). Names and tokens are unique,
// and a file holds at least one and at most kMaxCredentials credentials.
//
// Matching compares a presented digest with every credential's, each in
// constant time (DigestEqual) and without stopping at the first match, so
// the time taken tells nothing of which one matched.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/token.h"

namespace rkv {

// Thread safety: immutable once built (Parse, ReadFile, Add, Revoking);
// share it as a shared_ptr<const ClientCredentials>.
class ClientCredentials {
 public:
  static constexpr size_t kMaxNameBytes = 64;
  // Bounds the names a server's metrics label with.
  static constexpr size_t kMaxCredentials = 1024;
  static constexpr size_t kMaxFileBytes = size_t{1} << 20;

  struct Credential {
    std::string name;
    Sha256Digest digest{};  // TokenDigest of the token
  };

  // A digest matched against the set: the credential's name, and whether
  // it is one a reload removed (then refused: `revoked`).
  struct Match {
    std::string name;
    bool revoked = false;
    Sha256Digest digest{};  // the credential's
  };

  ClientCredentials() = default;

  // The credentials of a file's text; `origin` names it in errors
  // ("FILE:LINE: ..."). INVALID_ARGUMENT for a malformed line, a bad name
  // or token, a duplicate name or token (naming the earlier line), more
  // than kMaxCredentials, or no credential at all. When `own_token` is not
  // null, the token of the credential named `own_name` is copied to it
  // (a server's own credential, which it presents; the set keeps only
  // digests), and a file without that name is INVALID_ARGUMENT.
  static StatusOr<ClientCredentials> Parse(std::string_view text, std::string_view origin,
                                           std::string_view own_name = {}, std::string* own_token = nullptr);
  // Reads at most kMaxFileBytes (+1 to tell an over-long file) and
  // parses it (with `own_name` and `own_token` as Parse takes them).
  // Errors: ReadFileAtMost's (a directory, a missing file),
  // INVALID_ARGUMENT for a file over kMaxFileBytes, Parse's.
  static StatusOr<ClientCredentials> ReadFile(const std::string& path, std::string_view own_name = {},
                                              std::string* own_token = nullptr);

  // Adds one credential (e.g. --token_file's, named "token").
  // INVALID_ARGUMENT for a bad name or token, or one the set already holds.
  Status Add(std::string_view name, std::string_view token);
  // The same with the token's digest (TokenDigest) rather than the token.
  Status AddDigest(std::string_view name, const Sha256Digest& digest);

  // Whether `token` is one of the set's (its digest).
  bool Holds(std::string_view token) const;

  // The credential whose digest equals `digest` (32 bytes), current or
  // revoked; nullopt when none.
  std::optional<Match> Find(const uint8_t* digest) const;
  // The credential, current or revoked, whose digest `proves` accepts (a
  // connect proof's MAC check keyed by it, common/connect_proof.h);
  // nullopt when none. `proves` is called for every credential, a match
  // or not, so the time does not tell which one matched.
  std::optional<Match> FindByProof(const std::function<bool(const Sha256Digest&)>& proves) const;

  // This set as the one in force after `previous`: what `previous` held
  // (or had revoked) and this one does not hold is remembered as revoked
  // (by name and digest, so that refusals can name it), the most recent
  // kMaxCredentials of them.
  ClientCredentials Revoking(const ClientCredentials& previous) const;

  // What changed from `before` to this set: names added, and names
  // removed (a name whose token changed is in both).
  struct Change {
    std::vector<std::string> added;
    std::vector<std::string> removed;
  };
  Change ChangeFrom(const ClientCredentials& before) const;

  // Whether the credential `name` with `digest` is in the set (not
  // revoked): what an open connection made with it is checked against.
  bool Contains(std::string_view name, const Sha256Digest& digest) const;

  const std::vector<Credential>& credentials() const { return credentials_; }
  size_t size() const { return credentials_.size(); }

 private:
  friend StatusOr<ClientCredentials> LoadClientCredentials(const std::string& token, const std::string& path,
                                                           const std::vector<std::string>& other_roles,
                                                           const ClientCredentials* servers);

  std::vector<Credential> credentials_;
  std::vector<Credential> revoked_;  // oldest first
};

// The name --token_file's credential goes by.
inline constexpr std::string_view kTokenFileCredentialName = "token";

// A process's client credentials: `token` (--token_file's; "" for none)
// named kTokenFileCredentialName, then those of the credentials file at
// `path` ("" for none). INVALID_ARGUMENT with the file's error, for a file
// that names a credential "token" or holds --token_file's token, for no
// credential at all, or when a client credential is one of `other_roles`
// (the cluster and operator credentials; "" entries are skipped) or a
// credential of `servers` (the per-server credentials; null for none).
StatusOr<ClientCredentials> LoadClientCredentials(const std::string& token, const std::string& path,
                                                  const std::vector<std::string>& other_roles,
                                                  const ClientCredentials* servers = nullptr);

// "added NAME, ...; removed NAME, ..." (or "no change"), for a log line.
std::string DescribeChange(const ClientCredentials::Change& change);

// Whether `name` is a valid credential name (kMaxNameBytes of [A-Za-z0-9._-]).
bool IsValidCredentialName(std::string_view name);

// The client credentials in force in a process: an immutable set swapped
// whole by a reload, with a generation that tells readers it changed.
//
// Thread safety: every method may be called from any thread. A reader
// holds the set it got for as long as it uses it; a reload never changes
// a set in place.
class LiveClientCredentials {
 public:
  explicit LiveClientCredentials(ClientCredentials initial)
      : current_(std::make_shared<const ClientCredentials>(std::move(initial))) {}

  std::shared_ptr<const ClientCredentials> current() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return current_;
  }
  // Puts `next` in force (next.Revoking(current)), bumps the generation,
  // and returns what changed.
  ClientCredentials::Change Replace(const ClientCredentials& next) EXCLUDES(mu_);
  // A reload: LoadClientCredentials(token, path, other_roles) put in force
  // with Replace, and what changed; on error (the file's, naming the line)
  // the set in force stays as it was.
  StatusOr<ClientCredentials::Change> Reload(const std::string& token, const std::string& path,
                                             const std::vector<std::string>& other_roles,
                                             const ClientCredentials* servers = nullptr) EXCLUDES(mu_);
  // Starts at 0; +1 for each Replace. Acquire: a reader that sees a new
  // generation then reads the set it stands for (or a newer one).
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable Mutex mu_;
  std::shared_ptr<const ClientCredentials> current_ GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{0};
};

}  // namespace rkv
