#include "tests/lincheck/lincheck.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <unordered_set>
#include <utility>

namespace rkv::lincheck {
namespace {

constexpr int kAbsent = 0;  // register value id of "no value"

// One operation of the key being checked, with its values as small ids:
// 0 is absent, each distinct value written or initially present has its own
// id, and a read of a value nobody wrote is refused before the search.
struct KeyOp {
  const Operation* op = nullptr;
  int value_id = kAbsent;  // Put: the value written; Get kOk: the value read
};

// The register value after `op` when `op` can come next from `state`, or -1.
int Step(int state, const KeyOp& k) {
  const Operation& op = *k.op;
  switch (op.kind) {
    case OpKind::kGet:
      if (op.outcome == Outcome::kNotFound) return state == kAbsent ? state : -1;
      return state == k.value_id ? state : -1;
    case OpKind::kPut:
      return k.value_id;
    case OpKind::kDelete:
      if (op.outcome == Outcome::kOk) return state != kAbsent ? kAbsent : -1;
      if (op.outcome == Outcome::kNotFound) return state == kAbsent ? kAbsent : -1;
      return kAbsent;  // unknown outcome: the delete of an absent key changes nothing
  }
  return -1;
}

// Memo of explored configurations: which operations are placed, and the
// register value they leave.
struct Config {
  std::vector<uint64_t> placed;
  int state = kAbsent;
  bool operator==(const Config& o) const { return state == o.state && placed == o.placed; }
};

struct ConfigHash {
  size_t operator()(const Config& c) const {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(c.state);
    for (uint64_t w : c.placed) {
      h ^= w + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

std::string Quote(const std::string& s) {
  constexpr size_t kShown = 40;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  out += '"';
  if (s.size() > kShown) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string Millis(Time t, Time base) {
  const double ms = std::chrono::duration<double, std::milli>(t - base).count();
  char buf[32];
  std::snprintf(buf, sizeof(buf), "+%.3f ms", ms);
  return buf;
}

std::string Describe(const Operation& op, Time base) {
  std::string s = "client " + std::to_string(op.client) + " ";
  switch (op.kind) {
    case OpKind::kGet:
      s += "GET -> ";
      s += op.outcome == Outcome::kOk ? Quote(op.value) : "NOT_FOUND";
      break;
    case OpKind::kPut:
      s += "PUT " + Quote(op.value) + " -> " + (op.outcome == Outcome::kOk ? "OK" : "outcome unknown");
      break;
    case OpKind::kDelete:
      s += "DELETE -> ";
      s += op.outcome == Outcome::kOk ? "OK" : op.outcome == Outcome::kNotFound ? "NOT_FOUND" : "outcome unknown";
      break;
  }
  s += " [" + Millis(op.invoke, base) + ", ";
  s += op.outcome == Outcome::kUnknown ? std::string("never completed") : Millis(op.complete, base);
  s += "]";
  return s;
}

std::string StateName(int state, const std::vector<std::string>& values) {
  return state == kAbsent ? std::string("absent") : Quote(values[static_cast<size_t>(state)]);
}

// Why `k` cannot come next when the register holds `state`.
std::string WhyNot(const KeyOp& k, int state, const std::vector<std::string>& values) {
  const Operation& op = *k.op;
  if (Step(state, k) >= 0) return "fits here, but every order that starts with it fails later";
  const std::string now = StateName(state, values);
  if (op.kind == OpKind::kGet && op.outcome == Outcome::kOk)
    return "reads " + Quote(op.value) + " but the value is " + now;
  if (op.kind == OpKind::kGet) return "finds the key absent but the value is " + now;
  if (op.outcome == Outcome::kOk) return "deletes the key but it is absent";
  return "finds the key absent but the value is " + now;
}

struct KeyResult {
  Verdict verdict = Verdict::kLinearizable;
  std::string explanation;
};

// Checks the operations of one key. `ops` holds no Get of unknown outcome.
KeyResult CheckKey(const std::string& key, const std::vector<const Operation*>& ops, const std::string* initial,
                   Time base, const CheckOptions& options) {
  // Value ids.
  std::vector<std::string> values = {""};  // [kAbsent] unused
  std::map<std::string, int> ids;
  auto id_of = [&](const std::string& v) {
    auto [it, fresh] = ids.emplace(v, static_cast<int>(values.size()));
    if (fresh) values.push_back(v);
    return it->second;
  };
  const int initial_state = initial ? id_of(*initial) : kAbsent;
  for (const Operation* op : ops) {
    if (op->kind == OpKind::kPut) id_of(op->value);
  }

  // Operations in invocation order, for the explanation.
  std::vector<const Operation*> by_invoke = ops;
  std::stable_sort(by_invoke.begin(), by_invoke.end(),
                   [](const Operation* a, const Operation* b) { return a->invoke < b->invoke; });
  auto listing = [&] {
    std::string s = "  its " + std::to_string(ops.size()) + " operations in invocation order (initial value " +
                    StateName(initial_state, values) + "):\n";
    for (const Operation* op : by_invoke) s += "    " + Describe(*op, base) + "\n";
    return s;
  };

  std::vector<KeyOp> kops;
  kops.reserve(ops.size());
  for (const Operation* op : ops) {
    KeyOp k{op, kAbsent};
    if (op->kind == OpKind::kPut) {
      k.value_id = ids.at(op->value);
    } else if (op->kind == OpKind::kGet && op->outcome == Outcome::kOk) {
      auto it = ids.find(op->value);
      if (it == ids.end()) {
        return {Verdict::kNotLinearizable, "key " + Quote(key) + ": " + Describe(*op, base) +
                                               " reads a value that no PUT of this key wrote and that was not "
                                               "its initial value.\n" +
                                               listing()};
      }
      k.value_id = it->second;
    }
    kops.push_back(k);
  }

  // The entry list: a call and a return entry per operation, in time order;
  // an operation of unknown outcome returns after everything else. At equal
  // times a call comes first (the two operations count as concurrent).
  const size_t n = kops.size();
  struct Entry {
    Time time;
    bool call;
    size_t op;
  };
  std::vector<Entry> entries;
  entries.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const Operation& op = *kops[i].op;
    entries.push_back({op.invoke, true, i});
    entries.push_back({op.outcome == Outcome::kUnknown ? Time::max() : op.complete, false, i});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.time != b.time) return a.time < b.time;
    return a.call && !b.call;
  });
  // A doubly linked list over the entries with a head sentinel at index
  // 2n; placing an operation unlinks both of its entries, and backtracking
  // relinks them in the reverse order (dancing links).
  const size_t head = 2 * n;
  std::vector<size_t> next(2 * n + 1), prev(2 * n + 1), return_of(n);
  for (size_t e = 0; e < 2 * n; ++e) {
    if (!entries[e].call) return_of[entries[e].op] = e;
  }
  for (size_t e = 0; e < 2 * n; ++e) {
    next[e] = e + 1 < 2 * n ? e + 1 : head;
    prev[e] = e > 0 ? e - 1 : head;
  }
  next[head] = n > 0 ? 0 : head;
  prev[head] = n > 0 ? 2 * n - 1 : head;
  auto unlink = [&](size_t e) {
    next[prev[e]] = next[e];
    prev[next[e]] = prev[e];
  };
  auto relink = [&](size_t e) {
    next[prev[e]] = e;
    prev[next[e]] = e;
  };

  struct Placed {
    size_t call_entry;
    int state_before;
  };
  std::vector<Placed> stack;
  std::vector<size_t> deepest;  // ops of the longest prefix seen
  int deepest_state = initial_state;
  Config config{std::vector<uint64_t>((n + 63) / 64, 0), initial_state};
  std::unordered_set<Config, ConfigHash> seen;

  size_t e = next[head];
  while (next[head] != head) {
    if (entries[e].call) {
      const size_t i = entries[e].op;
      const int after = Step(config.state, kops[i]);
      if (after >= 0) {
        Config c = config;
        c.placed[i / 64] |= uint64_t{1} << (i % 64);
        c.state = after;
        if (seen.insert(c).second) {
          if (seen.size() > options.max_states) {
            return {Verdict::kGaveUp, "key " + Quote(key) + ": more than " + std::to_string(options.max_states) +
                                          " configurations explored among " + std::to_string(n) + " operations.\n"};
          }
          stack.push_back({e, config.state});
          config = std::move(c);
          unlink(e);
          unlink(return_of[i]);
          if (stack.size() > deepest.size()) {
            deepest.clear();
            for (const Placed& p : stack) deepest.push_back(entries[p.call_entry].op);
            deepest_state = config.state;
          }
          e = next[head];
          continue;
        }
      }
      e = next[e];
      continue;
    }
    // The return of an operation not yet placed: every operation that may
    // precede it was tried here. Take back the last placement.
    if (stack.empty()) break;
    const Placed p = stack.back();
    stack.pop_back();
    const size_t i = entries[p.call_entry].op;
    relink(return_of[i]);
    relink(p.call_entry);
    config.placed[i / 64] &= ~(uint64_t{1} << (i % 64));
    config.state = p.state_before;
    e = next[p.call_entry];
  }
  if (next[head] == head) return {};

  // Not linearizable: explain from the longest prefix found.
  std::vector<bool> placed(n, false);
  for (size_t i : deepest) placed[i] = true;
  std::string s = "key " + Quote(key) + ": no order of its operations agrees with their real-time order and " +
                  "results.\n" + listing();
  s += "  the longest linearizable prefix (" + std::to_string(deepest.size()) + " operations):\n";
  for (size_t i : deepest) s += "    " + Describe(*kops[i].op, base) + "\n";
  s += "  after it the value is " + StateName(deepest_state, values) + ", and no operation that may come next fits:\n";
  for (size_t x = 0; x < n; ++x) {
    if (placed[x]) continue;
    bool may_go_next = true;
    for (size_t y = 0; y < n && may_go_next; ++y) {
      const Operation& oy = *kops[y].op;
      if (!placed[y] && y != x && oy.outcome != Outcome::kUnknown && oy.complete < kops[x].op->invoke) {
        may_go_next = false;
      }
    }
    if (may_go_next) {
      s += "    " + Describe(*kops[x].op, base) + ": " + WhyNot(kops[x], deepest_state, values) + "\n";
    }
  }
  return {Verdict::kNotLinearizable, s};
}

}  // namespace

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kLinearizable:
      return "linearizable";
    case Verdict::kNotLinearizable:
      return "NOT linearizable";
    case Verdict::kInvalidHistory:
      return "invalid history";
    case Verdict::kGaveUp:
      return "gave up";
  }
  return "?";
}

CheckResult Check(const History& history, const CheckOptions& options) {
  CheckResult result;
  if (history.operations.empty()) return result;
  Time base = Time::max();
  for (const Operation& op : history.operations) base = std::min(base, op.invoke);

  std::map<std::string, std::vector<const Operation*>> per_key;
  for (size_t i = 0; i < history.operations.size(); ++i) {
    const Operation& op = history.operations[i];
    std::string bad;
    if (op.kind == OpKind::kPut && op.outcome == Outcome::kNotFound) bad = "a PUT cannot return NOT_FOUND";
    if (op.outcome != Outcome::kUnknown && op.complete < op.invoke) bad = "it completed before it was invoked";
    if (!bad.empty()) {
      result.verdict = Verdict::kInvalidHistory;
      result.explanation = "operation " + std::to_string(i) + " (" + Describe(op, base) + "): " + bad + "\n";
      return result;
    }
    if (op.kind == OpKind::kGet && op.outcome == Outcome::kUnknown) continue;  // says nothing
    per_key[op.key].push_back(&op);
  }

  for (const auto& [key, ops] : per_key) {
    auto init = history.initial.find(key);
    KeyResult k = CheckKey(key, ops, init == history.initial.end() ? nullptr : &init->second, base, options);
    if (k.verdict == Verdict::kLinearizable) continue;
    if (k.verdict == Verdict::kGaveUp && result.verdict == Verdict::kLinearizable) result.verdict = Verdict::kGaveUp;
    if (k.verdict == Verdict::kNotLinearizable) result.verdict = Verdict::kNotLinearizable;
    result.failing_keys.push_back(key);
    if (result.failing_keys.size() <= options.max_explained) result.explanation += k.explanation;
  }
  if (result.failing_keys.size() > options.max_explained) {
    result.explanation +=
        "(and " + std::to_string(result.failing_keys.size() - options.max_explained) + " more keys)\n";
  }
  return result;
}

}  // namespace rkv::lincheck
