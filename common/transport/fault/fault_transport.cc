#include "common/transport/fault/fault_transport.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "common/transport/fault/fault_connection.h"
#include "common/transport/fault/fault_poll_group.h"

namespace rkv::transport::fault {
namespace {

using std::chrono::milliseconds;

// A copy of `data` with `rule`'s bytes flipped.
std::vector<uint8_t> Corrupted(std::span<const uint8_t> data, const FaultRule& rule) {
  std::vector<uint8_t> copy(data.begin(), data.end());
  const size_t at = std::min(rule.corrupt_at, copy.size());
  const size_t n = std::min(rule.corrupt_bytes, copy.size() - at);
  for (size_t i = at; i < at + n; ++i) copy[i] ^= 0xff;
  return copy;
}

class FaultListener final : public Listener {
 public:
  FaultListener(std::unique_ptr<Listener> inner, std::shared_ptr<Transport> inner_transport,
                std::shared_ptr<FaultInjector> faults)
      : inner_transport_(std::move(inner_transport)), faults_(std::move(faults)), inner_(std::move(inner)) {}

  std::string address() const override { return inner_->address(); }

  using Listener::Next;
  StatusOr<std::unique_ptr<Connection>> Next(milliseconds timeout, const Screen& screen,
                                             const GroupChooser& choose) override {
    // The caller chooses among this transport's groups; the inner listener
    // gets the chosen one's inner group.
    FaultPollGroup* group = nullptr;
    GroupChooser inner_choose;
    if (choose) {
      inner_choose = [&](std::span<const uint8_t> data) -> PollGroup* {
        group = static_cast<FaultPollGroup*>(choose(data));
        return group == nullptr ? nullptr : group->inner();
      };
    }
    // The inner listener screens: a screened-out request never reaches
    // the fault rules (no ACCEPT is counted for it).
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, inner_->Next(timeout, screen, inner_choose));
    if (conn == nullptr) return std::unique_ptr<Connection>();
    FaultPoint point;
    std::optional<FaultRule> rule = faults_->Next(FaultOp::kAccept, point);
    std::optional<std::vector<uint8_t>> peer_data;
    if (rule && rule->action == FaultAction::kCorrupt) {
      peer_data = Corrupted(conn->peer_private_data(), *rule);
      rule.reset();
    }
    return std::unique_ptr<Connection>(
        std::make_unique<FaultConnection>(std::move(conn), inner_transport_, faults_, std::move(peer_data), rule,
                                          group));
  }

  ListenerCounters counters() const override { return inner_->counters(); }
  void Shutdown() override { inner_->Shutdown(); }

 private:
  std::shared_ptr<Transport> inner_transport_;
  std::shared_ptr<FaultInjector> faults_;
  std::unique_ptr<Listener> inner_;
};

}  // namespace

FaultTransport::FaultTransport(std::unique_ptr<Transport> inner)
    : inner_(std::move(inner)), faults_(std::make_shared<FaultInjector>()) {}

FaultTransport::~FaultTransport() = default;

StatusOr<std::unique_ptr<PollGroup>> FaultTransport::NewPollGroup() {
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<PollGroup> inner, inner_->NewPollGroup());
  return std::unique_ptr<PollGroup>(std::make_unique<FaultPollGroup>(std::move(inner)));
}

Kind FaultTransport::kind() const { return inner_->kind(); }

StatusOr<std::unique_ptr<MemoryRegion>> FaultTransport::Register(void* addr, size_t length, uint32_t access) {
  return inner_->Register(addr, length, access);
}

StatusOr<std::unique_ptr<Listener>> FaultTransport::Listen(const std::string& address) {
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<Listener> listener, inner_->Listen(address));
  return std::unique_ptr<Listener>(std::make_unique<FaultListener>(std::move(listener), inner_, faults_));
}

StatusOr<std::unique_ptr<Connection>> FaultTransport::Connect(const std::string& address,
                                                              std::span<const uint8_t> private_data,
                                                              milliseconds timeout, Rejection* rejected) {
  FaultPoint point;
  const std::optional<FaultRule> rule = faults_->Next(FaultOp::kConnect, point);
  const std::string which = "connect #" + std::to_string(point.index) + " to " + address;
  if (rule) {
    switch (rule->action) {
      case FaultAction::kFail:
        return Unavailable(which + ": injected failure");
      case FaultAction::kDrop:
        std::this_thread::sleep_for(timeout);
        return DeadlineExceeded(which + ": the request was dropped (injected)");
      case FaultAction::kDelay: {
        const auto delay = std::chrono::ceil<milliseconds>(rule->delay);
        if (delay >= timeout) {
          std::this_thread::sleep_for(timeout);
          return DeadlineExceeded(which + ": delayed past its timeout (injected)");
        }
        std::this_thread::sleep_for(rule->delay);
        timeout -= delay;
        break;
      }
      case FaultAction::kCorrupt:
        break;  // below, once connected
    }
  }
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, inner_->Connect(address, private_data, timeout, rejected));
  std::optional<std::vector<uint8_t>> peer_data;
  if (rule && rule->action == FaultAction::kCorrupt) peer_data = Corrupted(conn->peer_private_data(), *rule);
  return std::unique_ptr<Connection>(
      std::make_unique<FaultConnection>(std::move(conn), inner_, faults_, std::move(peer_data), std::nullopt));
}

StatusOr<std::unique_ptr<FaultTransport>> CreateFaultTransport(std::unique_ptr<Transport> inner,
                                                               std::string_view spec) {
  auto transport = std::make_unique<FaultTransport>(std::move(inner));
  RKV_RETURN_IF_ERROR(transport->faults().AddSpec(spec));
  return transport;
}

Connection* WrappedConnection(Connection& connection) {
  auto* wrapper = dynamic_cast<FaultConnection*>(&connection);
  return wrapper == nullptr ? nullptr : &wrapper->inner();
}

}  // namespace rkv::transport::fault
