// Test access to a verbs connection's queue pair: what a test needs to make
// a peer vanish without a disconnect, as a host that lost power or its
// link does. Test code only.
#pragma once

#include <infiniband/verbs.h>

#include "common/status.h"
#include "common/transport/transport.h"
#include "common/transport/verbs/verbs_connection.h"
#include "common/transport/verbs/verbs_resources.h"

namespace rkv::transport::verbs {

class VerbsConnectionTestPeer {
 public:
  // Moves `conn`'s queue pair to RESET, sending no disconnect and keeping
  // its rdma_cm id: the peer's requests then meet a queue pair that
  // answers nothing (a device drops packets for a queue pair before RTR,
  // as for one destroyed), so the peer learns it only from its retries
  // running out. `conn` is unusable afterwards; destroy it as usual.
  // INVALID_ARGUMENT when `conn` is not a verbs connection.
  static Status Vanish(Connection& conn) {
    auto* verbs = dynamic_cast<VerbsConnection*>(&conn);
    if (verbs == nullptr) return InvalidArgument("Vanish: not a verbs connection");
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RESET;
    if (const int ret = ibv_modify_qp(verbs->qp_.get(), &attr, IBV_QP_STATE); ret != 0) {
      return VerbsError("ibv_modify_qp(RESET)", ret);
    }
    return Status::Ok();
  }
};

}  // namespace rkv::transport::verbs
