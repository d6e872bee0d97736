#include "bench/failover/key_load.h"

#include <algorithm>
#include <random>
#include <utility>

namespace rkv::bench {

KeyLoad::KeyLoad(const KeyLoadOptions& options) : options_(options), chooser_(options.distribution, options.records) {}

KeyLoad::~KeyLoad() { Stop(); }

StatusOr<std::unique_ptr<KeyLoad>> KeyLoad::Connect(const ClientOptions& client_options,
                                                    const KeyLoadOptions& options,
                                                    std::chrono::seconds connect_wait) {
  std::unique_ptr<KeyLoad> load(new KeyLoad(options));
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

Status KeyLoad::Preload(std::chrono::seconds wait) {
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

void KeyLoad::Start() {
  for (size_t w = 0; w < workers_.size(); ++w) threads_.emplace_back([this, w] { Run(w); });
}

void KeyLoad::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  for (auto& t : threads_) t.join();
  threads_.clear();
}

std::vector<std::vector<KeyCall>> KeyLoad::Take() {
  std::vector<std::vector<KeyCall>> out(workers_.size());
  for (size_t w = 0; w < workers_.size(); ++w) {
    MutexLock lock(workers_[w]->mu);
    out[w].swap(workers_[w]->calls);
  }
  return out;
}

std::string KeyLoad::first_failure() const {
  MutexLock lock(failure_mu_);
  return first_failure_;
}

void KeyLoad::NoteFailure(const std::string& what, const Status& s) {
  MutexLock lock(failure_mu_);
  if (first_failure_.empty()) first_failure_ = what + ": " + s.ToString();
}

void KeyLoad::Run(size_t w) {
  Worker& worker = *workers_[w];
  std::mt19937_64 rng(options_.seed * 1000003 + w);
  std::uniform_int_distribution<int> percent(0, 99);
  // Each PUT writes a value that differs from the last one in its first
  // bytes (a counter), so no write is a no-op.
  std::string value(options_.value_bytes, 'v');
  std::string read;
  uint64_t counter = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    KeyCall call;
    call.record = static_cast<uint32_t>(chooser_.Next(rng));
    const std::string key = RecordKey(call.record);
    call.op = percent(rng) < options_.read_percent ? KeyCall::Op::kGet : KeyCall::Op::kPut;
    Status status = Status::Ok();
    call.start = Clock::now();
    if (call.op == KeyCall::Op::kGet) {
      status = worker.client->Get(key, &read);
    } else {
      const std::string stamp = std::to_string(++counter);
      value.replace(0, std::min(stamp.size(), value.size()), stamp.substr(0, value.size()));
      status = worker.client->Put(key, value).status();
    }
    call.end = Clock::now();
    call.code = status.code();
    if (!call.ok()) NoteFailure((call.op == KeyCall::Op::kGet ? "GET " : "PUT ") + key, status);
    MutexLock lock(worker.mu);
    worker.calls.push_back(call);
  }
}

}  // namespace rkv::bench
