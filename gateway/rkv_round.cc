#include "gateway/rkv_round.h"

#include <algorithm>
#include <utility>

#include "rkv/client.h"

namespace rkv::gateway {

RkvRound::RkvRound(rkv::Client* client, size_t max_items) : client_(client), max_items_(std::max<size_t>(1, max_items)) {}

size_t RkvRound::AddGet(std::string key) {
  get_keys_.push_back(std::move(key));
  return get_keys_.size() - 1;
}

size_t RkvRound::AddPut(std::string key, std::string value) {
  put_value_bytes_ += value.size();
  put_keys_.push_back(std::move(key));
  put_values_.push_back(std::move(value));
  return put_keys_.size() - 1;
}

void RkvRound::Execute() {
  get_results_.clear();
  put_results_.clear();
  // One item alone takes the single-key call, whose path is shorter
  // (a lone client's latency); the results are the same.
  if (get_keys_.size() == 1) {
    get_results_.push_back(client_->Get(get_keys_[0]));
    ++batches_;
    ++items_;
  } else if (!get_keys_.empty()) {
    get_results_ = client_->MultiGet(get_keys_);
    ++batches_;
    items_ += get_keys_.size();
  }
  if (put_keys_.size() == 1) {
    put_results_.push_back(client_->Put(put_keys_[0], put_values_[0]));
    ++batches_;
    ++items_;
  } else if (!put_keys_.empty()) {
    // Views of the queued strings, which stay put until the call returns.
    std::vector<rkv::KeyValueView> items;
    items.reserve(put_keys_.size());
    for (size_t i = 0; i < put_keys_.size(); ++i) items.push_back({put_keys_[i], put_values_[i]});
    put_results_ = client_->MultiPut(items);
    ++batches_;
    items_ += put_keys_.size();
  }
  get_keys_.clear();
  put_keys_.clear();
  put_values_.clear();
  put_value_bytes_ = 0;
  executed_ = generation_++;
}

}  // namespace rkv::gateway
