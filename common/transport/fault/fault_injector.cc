#include "common/transport/fault/fault_injector.h"

#include <utility>

namespace rkv::transport::fault {

Status FaultInjector::Add(const FaultRule& rule) {
  RKV_RETURN_IF_ERROR(ValidateFaultRule(rule));
  MutexLock lock(mu_);
  rules_.push_back(ActiveRule{rule, 0, std::mt19937_64(rule.seed)});
  ++rules_per_op_[static_cast<size_t>(rule.op)];
  return Status::Ok();
}

Status FaultInjector::AddSpec(std::string_view spec) {
  RKV_ASSIGN_OR_RETURN(const std::vector<FaultRule> rules, ParseFaultSpec(spec));
  MutexLock lock(mu_);
  for (const FaultRule& rule : rules) {
    rules_.push_back(ActiveRule{rule, 0, std::mt19937_64(rule.seed)});
    ++rules_per_op_[static_cast<size_t>(rule.op)];
  }
  return Status::Ok();
}

void FaultInjector::ClearRules() {
  MutexLock lock(mu_);
  rules_.clear();
  rules_per_op_.fill(0);
}

void FaultInjector::SetHook(FaultOp op, FaultHook hook) {
  MutexLock lock(mu_);
  hooks_[static_cast<size_t>(op)] = std::move(hook);
}

uint64_t FaultInjector::count(FaultOp op) const {
  MutexLock lock(mu_);
  return counts_[static_cast<size_t>(op)];
}

bool FaultInjector::Selects(ActiveRule& r) {
  switch (r.rule.select) {
    case FaultSelect::kAll: return true;
    case FaultSelect::kNth: return r.seen == r.rule.n;
    case FaultSelect::kEvery: return r.seen % r.rule.n == 0;
    case FaultSelect::kProbability: {
      // 53 random bits as a double in [0, 1): the same draws from the same
      // seed everywhere (std::uniform_real_distribution's are not
      // specified).
      const double u = static_cast<double>(r.random() >> 11) * 0x1p-53;
      return u < r.rule.probability;
    }
  }
  return false;
}

std::optional<FaultRule> FaultInjector::Next(FaultOp op, FaultPoint& point) {
  const size_t k = static_cast<size_t>(op);
  std::optional<FaultRule> hit;
  FaultHook hook;
  {
    MutexLock lock(mu_);
    point.op = op;
    point.index = ++counts_[k];
    for (ActiveRule& r : rules_) {
      if (r.rule.op != op) continue;
      ++r.seen;
      // Every rule of the kind counts (and draws) on every operation, so
      // one rule's selection does not depend on another's.
      if (Selects(r) && !hit) hit = r.rule;
    }
    hook = hooks_[k];
  }
  if (hook) hook(point);
  return hit;
}

bool FaultInjector::PassThrough(FaultOp op, uint64_t n) {
  const size_t k = static_cast<size_t>(op);
  MutexLock lock(mu_);
  if (rules_per_op_[k] != 0 || hooks_[k]) return false;
  counts_[k] += n;
  return true;
}

}  // namespace rkv::transport::fault
