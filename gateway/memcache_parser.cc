#include "gateway/memcache_parser.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

namespace rkv::gateway {
namespace {

// memcached counts the tokens of a line plus one (its terminal empty
// token); the counts below are the words of the line, one less.
constexpr size_t kMaxWordsNonRetrieval = 24;  // memcached's MAX_TOKENS; more than any command takes

struct Line {
  std::string_view text;  // without "\n" and a "\r" right before it
  size_t consumed = 0;    // the line and its "\n"
};

// Splits `text` on spaces into `words`, at most `max` of them; returns
// false when there were more (then `words` holds the first `max`).
bool SplitWords(std::string_view text, std::vector<std::string_view>* words, size_t max) {
  words->clear();
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    if (i == text.size()) break;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ') ++i;
    if (words->size() == max) return false;
    words->push_back(text.substr(start, i - start));
  }
  return true;
}

bool IsRetrievalLine(std::string_view in) {
  size_t i = 0;
  // memcached lets a partial line start with up to 100 spaces before it
  // closes one over 2048 bytes.
  while (i < in.size() && i <= 100 && in[i] == ' ') ++i;
  if (i > 100) return false;
  const std::string_view rest = in.substr(i);
  for (std::string_view c : {"get ", "gets ", "gat ", "gats "}) {
    if (rest.substr(0, c.size()) == c) return true;
  }
  return false;
}

bool KeyOk(std::string_view key, const ParserLimits& limits) {
  if (key.empty() || key.size() > limits.max_key_bytes || key.size() > kMemcachedMaxKeyBytes) return false;
  for (unsigned char c : key) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

ParseResult Error(size_t consumed, std::string_view reply, bool noreply) {
  ParseResult r;
  r.kind = ParseKind::kError;
  r.consumed = consumed;
  r.reply = noreply ? std::string_view() : reply;
  return r;
}

ParseResult Request(size_t consumed, MemcacheRequest request) {
  ParseResult r;
  r.kind = ParseKind::kRequest;
  r.consumed = consumed;
  r.request = std::move(request);
  return r;
}

struct CommandName {
  std::string_view name;
  MemcacheCommand command;
};
constexpr std::array<CommandName, 19> kCommands = {{
    {"get", MemcacheCommand::kGet},
    {"gets", MemcacheCommand::kGets},
    {"set", MemcacheCommand::kSet},
    {"add", MemcacheCommand::kAdd},
    {"replace", MemcacheCommand::kReplace},
    {"append", MemcacheCommand::kAppend},
    {"prepend", MemcacheCommand::kPrepend},
    {"cas", MemcacheCommand::kCas},
    {"gat", MemcacheCommand::kGat},
    {"gats", MemcacheCommand::kGats},
    {"delete", MemcacheCommand::kDelete},
    {"incr", MemcacheCommand::kIncr},
    {"decr", MemcacheCommand::kDecr},
    {"touch", MemcacheCommand::kTouch},
    {"version", MemcacheCommand::kVersion},
    {"stats", MemcacheCommand::kStats},
    {"verbosity", MemcacheCommand::kVerbosity},
    {"flush_all", MemcacheCommand::kFlushAll},
    {"quit", MemcacheCommand::kQuit},
}};

bool LookUp(std::string_view name, MemcacheCommand* command) {
  for (const CommandName& c : kCommands) {
    if (c.name == name) {
      *command = c.command;
      return true;
    }
  }
  return false;
}

// The last word is "noreply" (memcached's set_noreply_maybe).
bool NoReply(const std::vector<std::string_view>& words) {
  return !words.empty() && words.back() == "noreply";
}

// Storage commands: <cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply].
ParseResult ParseStorage(std::string_view in, const Line& line, MemcacheCommand command,
                         const std::vector<std::string_view>& words, const ParserLimits& limits) {
  const bool cas = command == MemcacheCommand::kCas;
  const size_t base = cas ? 6 : 5;
  if (words.size() != base && words.size() != base + 1) return Error(line.consumed, kReplyError, false);
  MemcacheRequest req;
  req.command = command;
  req.noreply = NoReply(words);
  req.key = words[1];
  if (!KeyOk(req.key, limits)) return Error(line.consumed, kReplyBadFormat, req.noreply);
  uint64_t flags = 0;
  int64_t bytes = 0;
  // memcached keeps the low 32 bits of a larger flags value.
  if (!ParseMemcacheU64(words[2], &flags) || !ParseMemcacheI64(words[3], &req.exptime) ||
      !ParseMemcacheI64(words[4], &bytes)) {
    return Error(line.consumed, kReplyBadFormat, req.noreply);
  }
  req.flags = static_cast<uint32_t>(flags);
  if (cas && !ParseMemcacheU64(words[5], &req.cas_unique)) {
    return Error(line.consumed, kReplyBadFormat, req.noreply);
  }
  if (bytes < 0 || bytes > std::numeric_limits<int32_t>::max() - 2) {
    return Error(line.consumed, kReplyBadFormat, req.noreply);
  }
  const uint64_t block = static_cast<uint64_t>(bytes) + 2;
  if (static_cast<uint64_t>(bytes) > limits.max_data_bytes) {
    ParseResult r;
    r.kind = ParseKind::kTooLarge;
    r.consumed = line.consumed;
    r.request = std::move(req);
    r.reply = r.request.noreply ? std::string_view() : kReplyTooLarge;
    r.swallow = block;
    return r;
  }
  if (in.size() - line.consumed < block) return ParseResult{};  // the block is still arriving
  const std::string_view data = in.substr(line.consumed, block);
  if (data.substr(data.size() - 2) != "\r\n") {
    return Error(line.consumed + block, kReplyBadChunk, req.noreply);
  }
  req.data = data.substr(0, data.size() - 2);
  return Request(line.consumed + block, std::move(req));
}

ParseResult ParseRetrieval(const Line& line, MemcacheCommand command, std::vector<std::string_view>& words,
                           const ParserLimits& limits) {
  const bool touching = command == MemcacheCommand::kGat || command == MemcacheCommand::kGats;
  MemcacheRequest req;
  req.command = command;
  size_t first_key = 1;
  if (touching) {
    if (words.size() < 2) return Error(line.consumed, kReplyError, false);
    if (!ParseMemcacheI64(words[1], &req.exptime)) return Error(line.consumed, kReplyBadExptime, false);
    first_key = 2;
  } else if (words.size() < 2) {
    return Error(line.consumed, kReplyError, false);
  }
  req.keys.reserve(words.size() - first_key);
  for (size_t i = first_key; i < words.size(); ++i) {
    if (!KeyOk(words[i], limits)) return Error(line.consumed, kReplyBadFormat, false);
    req.keys.push_back(words[i]);
  }
  return Request(line.consumed, std::move(req));
}

ParseResult ParseLine(std::string_view in, const Line& line, const ParserLimits& limits) {
  std::vector<std::string_view> words;
  const bool retrieval_line = IsRetrievalLine(line.text);
  const bool all = SplitWords(line.text, &words, retrieval_line ? line.text.size() : kMaxWordsNonRetrieval);
  MemcacheCommand command = MemcacheCommand::kVersion;
  if (words.empty() || !LookUp(words[0], &command)) return Error(line.consumed, kReplyError, false);
  if (!all) return Error(line.consumed, kReplyError, false);  // more words than any such command takes
  MemcacheRequest req;
  req.command = command;
  switch (command) {
    case MemcacheCommand::kSet:
    case MemcacheCommand::kAdd:
    case MemcacheCommand::kReplace:
    case MemcacheCommand::kAppend:
    case MemcacheCommand::kPrepend:
    case MemcacheCommand::kCas:
      return ParseStorage(in, line, command, words, limits);
    case MemcacheCommand::kGet:
    case MemcacheCommand::kGets:
    case MemcacheCommand::kGat:
    case MemcacheCommand::kGats:
      return ParseRetrieval(line, command, words, limits);
    case MemcacheCommand::kDelete: {
      // delete <key> [0] [noreply]: memcached still takes the old "hold
      // time" argument when it is 0.
      if (words.size() < 2 || words.size() > 4) return Error(line.consumed, kReplyError, false);
      if (words.size() > 2) {
        const bool hold_is_zero = words[2] == "0";
        req.noreply = NoReply(words);
        const bool valid = (words.size() == 3 && (hold_is_zero || req.noreply)) ||
                           (words.size() == 4 && hold_is_zero && req.noreply);
        if (!valid) return Error(line.consumed, kReplyDeleteUsage, req.noreply);
      }
      req.key = words[1];
      if (!KeyOk(req.key, limits)) return Error(line.consumed, kReplyBadFormat, req.noreply);
      return Request(line.consumed, std::move(req));
    }
    case MemcacheCommand::kIncr:
    case MemcacheCommand::kDecr:
      if (words.size() != 3 && words.size() != 4) return Error(line.consumed, kReplyError, false);
      req.noreply = NoReply(words);
      req.key = words[1];
      if (!KeyOk(req.key, limits)) return Error(line.consumed, kReplyBadFormat, req.noreply);
      if (!ParseMemcacheU64(words[2], &req.delta)) return Error(line.consumed, kReplyBadDelta, req.noreply);
      return Request(line.consumed, std::move(req));
    case MemcacheCommand::kTouch:
      if (words.size() != 3 && words.size() != 4) return Error(line.consumed, kReplyError, false);
      req.noreply = NoReply(words);
      req.key = words[1];
      if (!KeyOk(req.key, limits)) return Error(line.consumed, kReplyBadFormat, req.noreply);
      if (!ParseMemcacheI64(words[2], &req.exptime)) return Error(line.consumed, kReplyBadExptime, req.noreply);
      return Request(line.consumed, std::move(req));
    case MemcacheCommand::kVersion:
    case MemcacheCommand::kQuit:
      return Request(line.consumed, std::move(req));
    case MemcacheCommand::kStats:
      if (words.size() > 1) req.stats_arg = words[1];
      return Request(line.consumed, std::move(req));
    case MemcacheCommand::kVerbosity:
      if (words.size() != 2 && words.size() != 3) return Error(line.consumed, kReplyError, false);
      req.noreply = NoReply(words);
      if (!ParseMemcacheU32(words[1], &req.verbosity)) return Error(line.consumed, kReplyBadFormat, req.noreply);
      return Request(line.consumed, std::move(req));
    case MemcacheCommand::kFlushAll:
      if (words.size() > 3) return Error(line.consumed, kReplyError, false);
      req.noreply = NoReply(words);
      // flush_all [delay] [noreply]: a second word is the delay unless it
      // is the noreply that ends the line.
      if (words.size() >= 2 && !(words.size() == 2 && req.noreply)) {
        req.has_delay = true;
        if (!ParseMemcacheI64(words[1], &req.delay)) return Error(line.consumed, kReplyBadExptime, req.noreply);
      }
      return Request(line.consumed, std::move(req));
  }
  return Error(line.consumed, kReplyError, false);
}

}  // namespace

bool IsStorageCommand(MemcacheCommand command) {
  switch (command) {
    case MemcacheCommand::kSet:
    case MemcacheCommand::kAdd:
    case MemcacheCommand::kReplace:
    case MemcacheCommand::kAppend:
    case MemcacheCommand::kPrepend:
    case MemcacheCommand::kCas:
      return true;
    default:
      return false;
  }
}

bool ParseMemcacheU64(std::string_view token, uint64_t* out) {
  if (!token.empty() && token[0] == '+') token.remove_prefix(1);
  if (token.empty()) return false;
  uint64_t v = 0;
  for (char c : token) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool ParseMemcacheU32(std::string_view token, uint32_t* out) {
  uint64_t v = 0;
  if (!ParseMemcacheU64(token, &v) || v > std::numeric_limits<uint32_t>::max()) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

bool ParseMemcacheI64(std::string_view token, int64_t* out) {
  bool negative = false;
  if (!token.empty() && (token[0] == '-' || token[0] == '+')) {
    negative = token[0] == '-';
    token.remove_prefix(1);
  }
  if (token.empty() || token[0] == '+') return false;
  uint64_t magnitude = 0;
  if (!ParseMemcacheU64(token, &magnitude)) return false;
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (negative) {
    if (magnitude > kMax + 1) return false;
    *out = magnitude == kMax + 1 ? std::numeric_limits<int64_t>::min() : -static_cast<int64_t>(magnitude);
  } else {
    if (magnitude > kMax) return false;
    *out = static_cast<int64_t>(magnitude);
  }
  return true;
}

ParseResult ParseMemcacheRequest(std::string_view in, const ParserLimits& limits) {
  const size_t window = std::min(in.size(), kMaxRetrievalLineBytes + 1);
  const void* nl = std::memchr(in.data(), '\n', window);
  if (nl == nullptr) {
    // A partial line: memcached closes one over 2048 bytes unless it is a
    // (long) multi-get.
    if (in.size() > kMaxLineBytes && (!IsRetrievalLine(in) || in.size() > kMaxRetrievalLineBytes)) {
      ParseResult r;
      r.kind = ParseKind::kClose;
      return r;
    }
    return ParseResult{};
  }
  const size_t end = static_cast<size_t>(static_cast<const char*>(nl) - in.data());
  Line line;
  line.consumed = end + 1;
  line.text = in.substr(0, end);
  if (!line.text.empty() && line.text.back() == '\r') line.text.remove_suffix(1);
  // The bytes before "\n" count, as they do in a partial line: a line is
  // refused the same however it was split.
  if (end > kMaxLineBytes && !IsRetrievalLine(line.text)) {
    ParseResult r;
    r.kind = ParseKind::kClose;
    return r;
  }
  return ParseLine(in, line, limits);
}

}  // namespace rkv::gateway
