#include "client/refusal.h"

namespace rkv::client {

RefusalDecision DecideOnRefusal(const Status& answer) {
  if (answer.ok()) return {};
  switch (answer.reason()) {
    case Reason::kNotPrimary:
    case Reason::kHandover:
    case Reason::kNoLease:
      return RefusalDecision{.resend = true, .min_map_version = answer.map_version()};
    case Reason::kNone:
    case Reason::kOutcomeUnknown:
    case Reason::kKeysMoved:
    case Reason::kConditionFailed:
      break;
  }
  return {};
}

bool KeysMoved(const Status& s) { return !s.ok() && s.reason() == Reason::kKeysMoved; }

}  // namespace rkv::client
