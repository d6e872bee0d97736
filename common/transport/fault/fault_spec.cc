#include "common/transport/fault/fault_spec.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>

namespace rkv::transport::fault {
namespace {

constexpr const char* kOpNames[] = {"read", "write", "send", "recv", "connect", "accept"};
constexpr const char* kActionNames[] = {"drop", "delay", "corrupt", "fail"};
static_assert(std::size(kOpNames) == kFaultOpCount);

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits `s` at every `sep`.
std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t at = s.find(sep);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

bool ParseUint(std::string_view s, uint64_t* out) {
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return !s.empty() && ec == std::errc() && ptr == end;
}

bool ParseProbability(std::string_view s, double* out) {
  // std::from_chars for double is not in every standard library this
  // builds with; the grammar is plain decimal, which strtod reads.
  if (s.empty() || s.size() > 32) return false;
  char buf[33];
  s.copy(buf, s.size());
  buf[s.size()] = '\0';
  char* end = nullptr;
  *out = std::strtod(buf, &end);
  return end == buf + s.size() && std::isfinite(*out);
}

// Parses one rule; the error says what is wrong, not which rule (the
// caller adds that).
StatusOr<FaultRule> ParseRule(std::string_view text) {
  const std::vector<std::string_view> fields = Split(text, ':');
  if (fields.size() < 2 || fields.size() > 3) {
    return InvalidArgument("expected OP:ACTION or OP:ACTION:PARAMS");
  }
  FaultRule rule;
  const std::string_view op = Trim(fields[0]);
  size_t i = 0;
  while (i < kFaultOpCount && op != kOpNames[i]) ++i;
  if (i == kFaultOpCount) {
    return InvalidArgument("unknown operation '" + std::string(op) +
                           "' (read, write, send, recv, connect or accept)");
  }
  rule.op = static_cast<FaultOp>(i);
  const std::string_view action = Trim(fields[1]);
  i = 0;
  while (i < std::size(kActionNames) && action != kActionNames[i]) ++i;
  if (i == std::size(kActionNames)) {
    return InvalidArgument("unknown action '" + std::string(action) + "' (drop, delay, corrupt or fail)");
  }
  rule.action = static_cast<FaultAction>(i);

  bool have_seed = false;
  bool have_delay = false;
  bool have_at = false;
  bool have_bytes = false;
  const auto number = [](std::string_view key, std::string_view value, uint64_t* out) -> Status {
    if (!ParseUint(value, out)) {
      return InvalidArgument(std::string(key) + "=" + std::string(value) + " is not a whole number");
    }
    return Status::Ok();
  };
  if (fields.size() == 3) {
    for (std::string_view param : Split(fields[2], ',')) {
      param = Trim(param);
      const size_t eq = param.find('=');
      if (eq == std::string_view::npos) {
        return InvalidArgument("parameter '" + std::string(param) + "' is not of the form NAME=VALUE");
      }
      const std::string_view key = Trim(param.substr(0, eq));
      const std::string_view value = Trim(param.substr(eq + 1));
      const std::string twice = "parameter '" + std::string(key) + "' is given more than once";
      const std::string one_selector = "at most one of nth, every and p may be given";
      uint64_t v = 0;
      if (key == "nth" || key == "every") {
        if (rule.select != FaultSelect::kAll) return InvalidArgument(one_selector);
        RKV_RETURN_IF_ERROR(number(key, value, &v));
        rule.select = key == "nth" ? FaultSelect::kNth : FaultSelect::kEvery;
        rule.n = v;
      } else if (key == "p") {
        if (rule.select != FaultSelect::kAll) return InvalidArgument(one_selector);
        if (!ParseProbability(value, &rule.probability)) {
          return InvalidArgument("p=" + std::string(value) + " is not a number");
        }
        rule.select = FaultSelect::kProbability;
      } else if (key == "seed") {
        if (have_seed) return InvalidArgument(twice);
        have_seed = true;
        RKV_RETURN_IF_ERROR(number(key, value, &rule.seed));
      } else if (key == "ms" || key == "us") {
        if (rule.action != FaultAction::kDelay) {
          return InvalidArgument(std::string(key) + " is for delay, not " + FaultActionName(rule.action));
        }
        if (have_delay) return InvalidArgument("at most one of ms and us may be given");
        have_delay = true;
        RKV_RETURN_IF_ERROR(number(key, value, &v));
        const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 1000);
        if (v > limit) return InvalidArgument(std::string(key) + "=" + std::string(value) + " is too long");
        rule.delay = key == "ms" ? std::chrono::microseconds(v * 1000) : std::chrono::microseconds(v);
      } else if (key == "at" || key == "bytes") {
        if (rule.action != FaultAction::kCorrupt) {
          return InvalidArgument(std::string(key) + " is for corrupt, not " + FaultActionName(rule.action));
        }
        bool& seen = key == "at" ? have_at : have_bytes;
        if (seen) return InvalidArgument(twice);
        seen = true;
        RKV_RETURN_IF_ERROR(number(key, value, &v));
        (key == "at" ? rule.corrupt_at : rule.corrupt_bytes) = static_cast<size_t>(v);
      } else {
        return InvalidArgument("unknown parameter '" + std::string(key) +
                               "' (nth, every, p, seed, ms, us, at or bytes)");
      }
    }
  }
  if (have_seed && rule.select != FaultSelect::kProbability) return InvalidArgument("seed is for p only");
  if (rule.action == FaultAction::kDelay && !have_delay) {
    return InvalidArgument("delay needs a duration: ms=N or us=N");
  }
  RKV_RETURN_IF_ERROR(ValidateFaultRule(rule));
  return rule;
}

}  // namespace

const char* FaultOpName(FaultOp op) { return kOpNames[static_cast<size_t>(op)]; }

const char* FaultActionName(FaultAction action) { return kActionNames[static_cast<size_t>(action)]; }

std::string FormatFaultRule(const FaultRule& rule) {
  std::string out = std::string(FaultOpName(rule.op)) + ":" + FaultActionName(rule.action);
  std::vector<std::string> params;
  switch (rule.select) {
    case FaultSelect::kAll: break;
    case FaultSelect::kNth: params.push_back("nth=" + std::to_string(rule.n)); break;
    case FaultSelect::kEvery: params.push_back("every=" + std::to_string(rule.n)); break;
    case FaultSelect::kProbability: {
      char p[32];
      std::snprintf(p, sizeof p, "%.17g", rule.probability);
      params.push_back(std::string("p=") + p);
      params.push_back("seed=" + std::to_string(rule.seed));
      break;
    }
  }
  if (rule.action == FaultAction::kDelay) params.push_back("us=" + std::to_string(rule.delay.count()));
  if (rule.action == FaultAction::kCorrupt) {
    params.push_back("at=" + std::to_string(rule.corrupt_at));
    params.push_back("bytes=" + std::to_string(rule.corrupt_bytes));
  }
  for (size_t i = 0; i < params.size(); ++i) out += (i == 0 ? ":" : ",") + params[i];
  return out;
}

Status ValidateFaultRule(const FaultRule& rule) {
  if (static_cast<size_t>(rule.op) >= kFaultOpCount ||
      static_cast<size_t>(rule.action) >= std::size(kActionNames)) {
    return InvalidArgument("fault rule with an unknown operation or action");
  }
  const std::string name = std::string(FaultOpName(rule.op)) + ":" + FaultActionName(rule.action);
  if (rule.op == FaultOp::kWrite && rule.action == FaultAction::kDelay) {
    return InvalidArgument(name + " is not supported: a WRITE has no completion of its own to hold back");
  }
  if ((rule.select == FaultSelect::kNth || rule.select == FaultSelect::kEvery) && rule.n == 0) {
    return InvalidArgument(name + ": nth and every count from 1");
  }
  if (rule.select == FaultSelect::kProbability && !(rule.probability >= 0 && rule.probability <= 1)) {
    return InvalidArgument(name + ": p must lie in [0, 1]");
  }
  if (rule.action == FaultAction::kDelay && rule.delay.count() <= 0) {
    return InvalidArgument(name + ": the delay must be positive");
  }
  if (rule.action == FaultAction::kCorrupt && rule.corrupt_bytes == 0) {
    return InvalidArgument(name + ": bytes must be at least 1");
  }
  return Status::Ok();
}

StatusOr<std::vector<FaultRule>> ParseFaultSpec(std::string_view spec) {
  std::vector<FaultRule> rules;
  if (Trim(spec).empty()) return rules;
  const std::vector<std::string_view> texts = Split(spec, ';');
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string_view text = Trim(texts[i]);
    StatusOr<FaultRule> rule = ParseRule(text);
    if (!rule.ok()) {
      return InvalidArgument("fault spec '" + std::string(spec) + "', rule " + std::to_string(i + 1) + " ('" +
                             std::string(text) + "'): " + rule.status().message());
    }
    rules.push_back(*rule);
  }
  return rules;
}

}  // namespace rkv::transport::fault
