#include "client/client_test_peer.h"

#include "client/client_impl.h"

namespace rkv {

uint64_t ClientTestPeer::AttemptsOn(const Client& client, std::string_view server_id) {
  return client.impl_->AttemptsOn(server_id);
}

}  // namespace rkv
