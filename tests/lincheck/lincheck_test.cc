#include "tests/lincheck/lincheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

namespace rkv::lincheck {
namespace {

const Time kT0 = std::chrono::steady_clock::now();

Time At(int ms) { return kT0 + std::chrono::milliseconds(ms); }

// Builders: an operation of client `c` on `key`, invoked at `from` and
// complete at `to` (milliseconds).
Operation Put(int c, const std::string& key, const std::string& value, int from, int to) {
  return {c, OpKind::kPut, key, value, Outcome::kOk, At(from), At(to)};
}
Operation PutUnknown(int c, const std::string& key, const std::string& value, int from) {
  return {c, OpKind::kPut, key, value, Outcome::kUnknown, At(from), At(from)};
}
Operation Get(int c, const std::string& key, const std::string& value, int from, int to) {
  return {c, OpKind::kGet, key, value, Outcome::kOk, At(from), At(to)};
}
Operation GetAbsent(int c, const std::string& key, int from, int to) {
  return {c, OpKind::kGet, key, "", Outcome::kNotFound, At(from), At(to)};
}
Operation Del(int c, const std::string& key, Outcome outcome, int from, int to) {
  return {c, OpKind::kDelete, key, "", outcome, At(from), At(to)};
}

CheckResult CheckOps(std::vector<Operation> ops, std::map<std::string, std::string> initial = {}) {
  History h;
  h.operations = std::move(ops);
  h.initial = std::move(initial);
  return Check(h);
}

void ExpectLinearizable(const CheckResult& r) {
  EXPECT_EQ(r.verdict, Verdict::kLinearizable) << VerdictName(r.verdict) << "\n" << r.explanation;
  EXPECT_TRUE(r.failing_keys.empty());
}

TEST(LincheckTest, SequentialHistoryOfEveryOperationIsLinearizable) {
  ExpectLinearizable(CheckOps({
      GetAbsent(0, "k", 0, 1),
      Put(0, "k", "a", 2, 3),
      Get(1, "k", "a", 4, 5),
      Del(1, "k", Outcome::kOk, 6, 7),
      Del(0, "k", Outcome::kNotFound, 8, 9),
      GetAbsent(0, "k", 10, 11),
      Put(1, "k", "", 12, 13),  // an empty value is a value, not absence
      Get(0, "k", "", 14, 15),
  }));
}

TEST(LincheckTest, ConcurrentOperationsMayTakeEffectInEitherOrder) {
  // Two overlapping puts; readers overlapping both see them in opposite
  // orders, which one order explains (b then a: the later reader sees a).
  ExpectLinearizable(CheckOps({
      Put(0, "k", "a", 0, 10),
      Put(1, "k", "b", 1, 9),
      Get(2, "k", "b", 2, 5),
      Get(3, "k", "a", 6, 12),
      Get(2, "k", "a", 13, 14),
  }));
  // A read overlapping a put may see the old or the new value.
  ExpectLinearizable(CheckOps(
      {Put(0, "k", "new", 5, 20), Get(1, "k", "old", 6, 7), Get(2, "k", "new", 8, 9), Get(1, "k", "new", 21, 22)},
      {{"k", "old"}}));
  // Operations that touch only at one instant count as concurrent.
  ExpectLinearizable(CheckOps({Put(0, "k", "a", 0, 5), Get(1, "k", "old", 5, 6)}, {{"k", "old"}}));
}

TEST(LincheckTest, RejectsAStaleRead) {
  // b was acknowledged before the read began: reading a is stale.
  const CheckResult r = CheckOps({
      Put(0, "k", "a", 0, 1),
      Put(1, "k", "b", 2, 3),
      Get(2, "k", "a", 4, 5),
  });
  ASSERT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_EQ(r.failing_keys, std::vector<std::string>{"k"});
  EXPECT_NE(r.explanation.find("key \"k\""), std::string::npos) << r.explanation;
  EXPECT_NE(r.explanation.find("client 2 GET -> \"a\""), std::string::npos) << r.explanation;
  EXPECT_NE(r.explanation.find("reads \"a\" but the value is \"b\""), std::string::npos) << r.explanation;
}

TEST(LincheckTest, RejectsAValueThatGoesBackAndForth) {
  // Each read alone is possible; together they need a to be written twice.
  const CheckResult r = CheckOps({
      Put(0, "k", "a", 0, 20),
      Put(1, "k", "b", 0, 20),
      Get(2, "k", "a", 1, 2),
      Get(2, "k", "b", 3, 4),
      Get(2, "k", "a", 5, 6),
  });
  ASSERT_EQ(r.verdict, Verdict::kNotLinearizable) << r.explanation;
  EXPECT_NE(r.explanation.find("longest linearizable prefix"), std::string::npos) << r.explanation;
}

TEST(LincheckTest, RejectsALostWrite) {
  // An acknowledged put that a later read does not see, from absent ...
  CheckResult r = CheckOps({Put(0, "k", "a", 0, 1), GetAbsent(1, "k", 2, 3)});
  ASSERT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_NE(r.explanation.find("finds the key absent but the value is \"a\""), std::string::npos) << r.explanation;
  // ... and over an initial value: the old value comes back.
  r = CheckOps({Put(0, "k", "new", 0, 1), Get(1, "k", "old", 2, 3)}, {{"k", "old"}});
  ASSERT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_NE(r.explanation.find("initial value \"old\""), std::string::npos) << r.explanation;
  // A lost delete: the deleted value is read again.
  r = CheckOps({Put(0, "k", "a", 0, 1), Del(0, "k", Outcome::kOk, 2, 3), Get(1, "k", "a", 4, 5)});
  ASSERT_EQ(r.verdict, Verdict::kNotLinearizable);
}

TEST(LincheckTest, RejectsAReadOfAValueNeverWritten) {
  const CheckResult r = CheckOps({Put(0, "k", "a", 0, 1), Get(1, "k", "zzz", 2, 3)});
  ASSERT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_NE(r.explanation.find("reads a value that no PUT of this key wrote"), std::string::npos) << r.explanation;
  EXPECT_NE(r.explanation.find("\"zzz\""), std::string::npos) << r.explanation;
}

TEST(LincheckTest, DeleteResultsMustMatchTheRegister) {
  // A delete that reports success on an absent key, or NOT_FOUND on a
  // present one, is wrong.
  EXPECT_EQ(CheckOps({Del(0, "k", Outcome::kOk, 0, 1)}).verdict, Verdict::kNotLinearizable);
  EXPECT_EQ(CheckOps({Put(0, "k", "a", 0, 1), Del(0, "k", Outcome::kNotFound, 2, 3)}).verdict,
            Verdict::kNotLinearizable);
  ExpectLinearizable(CheckOps({Del(0, "k", Outcome::kOk, 0, 1)}, {{"k", "x"}}));
}

TEST(LincheckTest, AWriteOfUnknownOutcomeMayTakeEffectLaterOrNever) {
  // Never seen.
  ExpectLinearizable(CheckOps({PutUnknown(0, "k", "a", 0), GetAbsent(1, "k", 10, 11), GetAbsent(1, "k", 50, 51)}));
  // Seen long after the call gave up: it may take effect at any later time.
  ExpectLinearizable(CheckOps({PutUnknown(0, "k", "a", 0), GetAbsent(1, "k", 10, 11), Get(1, "k", "a", 50, 51)}));
  // But once seen it cannot be unseen without another write.
  const CheckResult r = CheckOps({PutUnknown(0, "k", "a", 0), Get(1, "k", "a", 10, 11), GetAbsent(1, "k", 50, 51)});
  ASSERT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_NE(r.explanation.find("outcome unknown"), std::string::npos) << r.explanation;
  // Nor can it take effect before it was invoked.
  EXPECT_EQ(CheckOps({Get(1, "k", "a", 0, 1), PutUnknown(0, "k", "a", 5)}).verdict, Verdict::kNotLinearizable);
  // A delete of unknown outcome may or may not have removed the key.
  for (bool seen : {true, false}) {
    std::vector<Operation> ops = {Put(0, "k", "a", 0, 1), Del(0, "k", Outcome::kUnknown, 2, 2)};
    ops.push_back(seen ? GetAbsent(1, "k", 10, 11) : Get(1, "k", "a", 10, 11));
    ExpectLinearizable(CheckOps(ops));
  }
}

TEST(LincheckTest, AGetOfUnknownOutcomeSaysNothing) {
  ExpectLinearizable(
      CheckOps({Put(0, "k", "a", 0, 1), {1, OpKind::kGet, "k", "garbage", Outcome::kUnknown, At(2), At(2)}}));
}

TEST(LincheckTest, KeysAreCheckedOnTheirOwnAndTheFailingOneIsNamed) {
  const CheckResult r = CheckOps({
      Put(0, "good", "a", 0, 1),
      Get(1, "good", "a", 2, 3),
      Put(0, "bad", "x", 0, 1),
      Put(0, "bad", "y", 2, 3),
      Get(1, "bad", "x", 4, 5),
  });
  ASSERT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_EQ(r.failing_keys, std::vector<std::string>{"bad"});
  EXPECT_EQ(r.explanation.find("key \"good\""), std::string::npos) << r.explanation;
}

TEST(LincheckTest, MalformedOperationsAreRefused) {
  CheckResult r = CheckOps({Put(0, "k", "a", 5, 4)});
  EXPECT_EQ(r.verdict, Verdict::kInvalidHistory);
  EXPECT_NE(r.explanation.find("completed before it was invoked"), std::string::npos) << r.explanation;
  r = CheckOps({{0, OpKind::kPut, "k", "a", Outcome::kNotFound, At(0), At(1)}});
  EXPECT_EQ(r.verdict, Verdict::kInvalidHistory);
  EXPECT_NE(r.explanation.find("PUT cannot return NOT_FOUND"), std::string::npos) << r.explanation;
}

TEST(LincheckTest, GivesUpRatherThanRunningWithoutEnd) {
  // Many concurrent puts and reads nobody can explain: the search has to
  // try every order of the puts, more than a tiny budget allows.
  std::vector<Operation> ops;
  for (int c = 0; c < 12; ++c) ops.push_back(Put(c, "k", "v" + std::to_string(c), 0, 100));
  ops.push_back(Get(99, "k", "v0", 101, 102));
  ops.push_back(Get(99, "k", "v1", 103, 104));
  History h;
  h.operations = ops;
  CheckOptions tiny;
  tiny.max_states = 1000;
  EXPECT_EQ(Check(h, tiny).verdict, Verdict::kGaveUp);
  // With the default budget the memo makes it quick, and it is a violation.
  EXPECT_EQ(Check(h).verdict, Verdict::kNotLinearizable);
}

// Histories produced by a real register, each operation taking effect at a
// random instant inside its interval (some writes with unknown outcome that
// took effect or not), must all be accepted; the same histories with one
// read changed to a value the register never held there must not.
TEST(LincheckTest, RandomHistoriesOfARealRegisterAreAccepted) {
  std::mt19937_64 rng(42);
  int rejected_mutations = 0;
  for (int round = 0; round < 300; ++round) {
    struct Planned {
      Operation op;
      int effect;  // the instant it takes effect, in microseconds
      bool applies = true;
    };
    std::vector<Planned> plan;
    const int clients = 5;
    for (int c = 0; c < clients; ++c) {
      int t = static_cast<int>(rng() % 50);
      for (int i = 0; i < 15; ++i) {
        const int start = t + static_cast<int>(rng() % 30);
        const int end = start + 1 + static_cast<int>(rng() % 60);
        Planned p;
        p.op.client = c;
        p.op.key = "k" + std::to_string(rng() % 3);
        p.op.invoke = At(0) + std::chrono::microseconds(start);
        p.op.complete = At(0) + std::chrono::microseconds(end);
        p.effect = start + static_cast<int>(rng() % static_cast<uint64_t>(end - start + 1));
        const int kind = static_cast<int>(rng() % 10);
        p.op.kind = kind < 5 ? OpKind::kGet : kind < 8 ? OpKind::kPut : OpKind::kDelete;
        if (p.op.kind == OpKind::kPut) p.op.value = "c" + std::to_string(c) + "-" + std::to_string(i);
        p.op.outcome = Outcome::kOk;  // a GET's or DELETE's result comes from the register below
        if (p.op.kind != OpKind::kGet && rng() % 8 == 0) {
          p.op.outcome = Outcome::kUnknown;  // the client gave up; it applied or not
          p.applies = rng() % 2 == 0;
          p.effect = start + static_cast<int>(rng() % 500);  // possibly long after
        }
        plan.push_back(p);
        t = end + static_cast<int>(rng() % 5);
      }
    }
    // Apply in effect order (ties broken by plan order) to learn results.
    std::vector<size_t> order(plan.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return plan[a].effect < plan[b].effect; });
    std::map<std::string, std::optional<std::string>> reg;
    std::vector<std::pair<size_t, std::optional<std::string>>> reads;  // for mutation
    for (size_t i : order) {
      Operation& op = plan[i].op;
      std::optional<std::string>& v = reg[op.key];
      switch (op.kind) {
        case OpKind::kGet:
          op.outcome = v ? Outcome::kOk : Outcome::kNotFound;
          op.value = v.value_or("");
          reads.push_back({i, v});
          break;
        case OpKind::kPut:
          if (plan[i].applies) v = op.value;
          break;
        case OpKind::kDelete:
          if (op.outcome != Outcome::kUnknown) op.outcome = v ? Outcome::kOk : Outcome::kNotFound;
          if (plan[i].applies) v.reset();
          break;
      }
    }
    History h;
    for (const Planned& p : plan) h.operations.push_back(p.op);
    const CheckResult r = Check(h);
    ASSERT_EQ(r.verdict, Verdict::kLinearizable) << "round " << round << "\n" << r.explanation;

    // Plant a stale read: a read that began after two acknowledged writes
    // of the key, one after the other, returns the first one's value (every
    // value is written once).
    for (const auto& [i, seen] : reads) {
      const Operation& read = plan[i].op;
      const Operation* first = nullptr;
      const Operation* later = nullptr;
      for (const Planned& p : plan) {
        const Operation& o = p.op;
        if (o.key != read.key || o.kind != OpKind::kPut || o.outcome != Outcome::kOk) continue;
        if (first == nullptr || o.complete < first->invoke) first = &o;
      }
      if (first == nullptr) continue;
      for (const Planned& p : plan) {
        const Operation& o = p.op;
        if (o.key == read.key && o.kind == OpKind::kPut && o.outcome == Outcome::kOk && o.value != first->value &&
            first->complete < o.invoke && o.complete < read.invoke) {
          later = &o;
        }
      }
      if (later == nullptr) continue;
      History m = h;
      m.operations[i].outcome = Outcome::kOk;
      m.operations[i].value = first->value;
      const CheckResult mr = Check(m);
      ASSERT_EQ(mr.verdict, Verdict::kNotLinearizable) << "round " << round << ": a stale read was accepted";
      ++rejected_mutations;
      break;
    }
  }
  EXPECT_GT(rejected_mutations, 50);
}

}  // namespace
}  // namespace rkv::lincheck
