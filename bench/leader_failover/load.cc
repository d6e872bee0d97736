#include "bench/leader_failover/load.h"

#include <algorithm>
#include <random>
#include <utility>

namespace rkv::bench {

Load::Load(const LoadOptions& options) : options_(options), chooser_(options.distribution, options.records) {}

Load::~Load() { Stop(); }

StatusOr<std::unique_ptr<Load>> Load::Connect(const ClientOptions& client_options, const LoadOptions& options,
                                              std::chrono::seconds connect_wait) {
  std::unique_ptr<Load> load(new Load(options));
  const auto deadline = Clock::now() + connect_wait;
  for (int c = 0; c < options.clients; ++c) {
    auto worker = std::make_unique<Worker>();
    while (true) {
      auto client = Client::Connect(client_options);
      if (client.ok()) {
        worker->client = std::move(client).value();
        break;
      }
      if (Clock::now() >= deadline) return client.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    load->workers_.push_back(std::move(worker));
  }
  return load;
}

Status Load::Preload(std::chrono::seconds wait) {
  const auto deadline = Clock::now() + wait;
  const std::string value(options_.value_bytes, 'p');
  std::vector<Status> results(workers_.size(), Status::Ok());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers_.size(); ++w) {
    threads.emplace_back([&, w] {
      Client& client = *workers_[w]->client;
      for (uint64_t i = w; i < options_.records; i += workers_.size()) {
        while (true) {
          const Status s = client.Put(RecordKey(i), value).status();
          if (s.ok()) break;
          if (Clock::now() >= deadline) {
            results[w] = s;
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

void Load::Start() {
  for (size_t w = 0; w < workers_.size(); ++w) threads_.emplace_back([this, w] { Run(w); });
}

void Load::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  for (auto& t : threads_) t.join();
  threads_.clear();
}

std::vector<std::vector<CallRecord>> Load::Take() {
  std::vector<std::vector<CallRecord>> out(workers_.size());
  for (size_t w = 0; w < workers_.size(); ++w) {
    MutexLock lock(workers_[w]->mu);
    out[w].swap(workers_[w]->calls);
  }
  return out;
}

std::string Load::first_failure() const {
  MutexLock lock(failure_mu_);
  return first_failure_;
}

void Load::NoteFailure(const std::string& what, const Status& s) {
  MutexLock lock(failure_mu_);
  if (first_failure_.empty()) first_failure_ = what + ": " + s.ToString();
}

void Load::Run(size_t w) {
  Worker& worker = *workers_[w];
  std::mt19937_64 rng(options_.seed * 1000003 + w);
  std::uniform_int_distribution<int> percent(0, 99);
  // Each PUT writes a value that differs from the last one in its first
  // bytes (a counter), so no write is a no-op.
  std::string value(options_.value_bytes, 'v');
  uint64_t counter = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    const std::string key = RecordKey(chooser_.Next(rng));
    CallRecord call;
    call.op = percent(rng) < options_.read_percent ? CallRecord::Op::kGet : CallRecord::Op::kPut;
    Status status = Status::Ok();
    call.start = Clock::now();
    if (call.op == CallRecord::Op::kGet) {
      status = worker.client->Get(key).status();
    } else {
      const std::string stamp = std::to_string(++counter);
      value.replace(0, std::min(stamp.size(), value.size()), stamp.substr(0, value.size()));
      status = worker.client->Put(key, value).status();
    }
    call.end = Clock::now();
    call.ok = status.ok();
    if (!call.ok) NoteFailure((call.op == CallRecord::Op::kGet ? "GET " : "PUT ") + key, status);
    MutexLock lock(worker.mu);
    worker.calls.push_back(call);
  }
}

}  // namespace rkv::bench
