#include "server/server_metrics.h"

#include <chrono>
#include <set>
#include <string>

#include <gtest/gtest.h>

namespace rkv::server {
namespace {

TEST(ServerMetricsTest, EveryAdminCounterHasItsMetric) {
  std::set<std::string_view> mapped;
  for (const CounterMetric& m : CounterMetrics()) {
    EXPECT_TRUE(mapped.insert(m.counter).second) << m.counter << " mapped twice";
    EXPECT_TRUE(metrics::IsValidMetricName(m.family)) << m.family;
    EXPECT_TRUE(m.family.starts_with("rkv_server_")) << m.family;
    // Prometheus's conventions: a counter ends in _total, nothing else does.
    EXPECT_EQ(m.family.ends_with("_total"), m.type == metrics::MetricType::kCounter) << m.family;
  }
  const std::vector<AdminCounter> counters = ServerCounters(CounterSources{});
  for (const AdminCounter& c : counters) EXPECT_TRUE(mapped.contains(c.name)) << c.name << " has no metric";
  EXPECT_EQ(mapped.size(), counters.size());
}

TEST(ServerMetricsTest, LabelsTellASeriesFromItsFamilysOthers) {
  CounterSources sources;
  sources.server.puts = 5;
  sources.server.deletes = 2;
  sources.server.keys = 3;
  sources.server.replica_stale = 7;
  ServerMetricsInfo info;
  info.server_id = "s-1";
  info.transport = "tcp";
  info.epoch = 4;
  info.map_version = 9;
  info.table_slots = 12;
  const StatusOr<std::string> text = metrics::Render(ServerMetricFamilies(ServerCounters(sources), info));
  ASSERT_TRUE(text.ok()) << text.status();
  for (const char* line : {
           "# TYPE rkv_server_operations_total counter\n"
           "rkv_server_operations_total{op=\"put\"} 5\n"
           "rkv_server_operations_total{op=\"delete\"} 2\n",
           "rkv_server_keys 3\n",
           "rkv_server_replica_writes_total{outcome=\"installed\"} 0\n"
           "rkv_server_replica_writes_total{outcome=\"stale\"} 7\n"
           "rkv_server_replica_writes_total{outcome=\"refused\"} 0\n",
           "rkv_server_info{server_id=\"s-1\",transport=\"tcp\"} 1\n",
           "rkv_server_epoch 4\n",
           "rkv_server_map_version 9\n",
           "rkv_server_table_slots 12\n",
           "rkv_server_table_fill_ratio 0.25\n",
       }) {
    EXPECT_NE(text->find(line), std::string::npos) << line << "\nnot in:\n" << *text;
  }
}

TEST(ServerMetricsTest, ErrorRepliesAreOneSeriesAStatusCodeAndStallsAreInSeconds) {
  CounterSources sources;
  sources.server.error_replies[static_cast<size_t>(StatusCode::kInvalidArgument)] = 3;
  sources.server.error_replies[static_cast<size_t>(StatusCode::kFailedPrecondition)] = 2;
  sources.server.store_write_stall_micros = 1'500'000;
  sources.server.store_wal_bytes = 4096;
  const StatusOr<std::string> text = metrics::Render(ServerMetricFamilies(ServerCounters(sources), ServerMetricsInfo{}));
  ASSERT_TRUE(text.ok()) << text.status();
  for (const char* line : {
           "# TYPE rkv_server_error_replies_total counter\n"
           "rkv_server_error_replies_total{code=\"CANCELLED\"} 0\n",
           "rkv_server_error_replies_total{code=\"INVALID_ARGUMENT\"} 3\n",
           "rkv_server_error_replies_total{code=\"FAILED_PRECONDITION\"} 2\n",
           "rkv_server_error_replies_total{code=\"UNAUTHENTICATED\"} 0\n",
           "rkv_server_store_write_stall_seconds_total 1.5\n",
           "rkv_server_store_wal_written_bytes_total 4096\n",
       }) {
    EXPECT_NE(text->find(line), std::string::npos) << line << "\nnot in:\n" << *text;
  }
  EXPECT_EQ(text->find("code=\"OK\""), std::string::npos) << "OK replies are not errors";
}

TEST(ServerMetricsTest, ACounterWithoutAnEntryIsStillExported) {
  const std::vector<AdminCounter> counters = {{"new_counter", 11, "a counter added later"}};
  const StatusOr<std::string> text = metrics::Render(ServerMetricFamilies(counters, ServerMetricsInfo{}));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("# HELP rkv_server_new_counter a counter added later\n"
                       "# TYPE rkv_server_new_counter gauge\n"
                       "rkv_server_new_counter 11\n"),
            std::string::npos)
      << *text;
}

TEST(ServerMetricsTest, ApplyLatencyIsAHistogramInSecondsByWhereTheWriteCameFrom) {
  LatencyHistogram client;
  client.Record(std::chrono::microseconds(40));
  client.Record(std::chrono::microseconds(40));
  client.Record(std::chrono::seconds(20));
  LatencyHistogram replica;
  replica.Record(std::chrono::microseconds(8));
  ServerMetricsInfo info;
  info.client_apply = client.Read();
  info.replica_apply = replica.Read();
  const StatusOr<std::string> text = metrics::Render(ServerMetricFamilies({}, info));
  ASSERT_TRUE(text.ok()) << text.status();
  for (const char* line : {
           "# TYPE rkv_server_apply_seconds histogram\n",
           "rkv_server_apply_seconds_bucket{from=\"client\",le=\"1e-05\"} 0\n"
           "rkv_server_apply_seconds_bucket{from=\"client\",le=\"2.5e-05\"} 0\n"
           "rkv_server_apply_seconds_bucket{from=\"client\",le=\"5e-05\"} 2\n",
           "rkv_server_apply_seconds_bucket{from=\"client\",le=\"10\"} 2\n"
           "rkv_server_apply_seconds_bucket{from=\"client\",le=\"+Inf\"} 3\n"
           "rkv_server_apply_seconds_sum{from=\"client\"} 20.00008\n"
           "rkv_server_apply_seconds_count{from=\"client\"} 3\n",
           "rkv_server_apply_seconds_bucket{from=\"replica\",le=\"1e-05\"} 1\n",
           "rkv_server_apply_seconds_count{from=\"replica\"} 1\n",
       }) {
    EXPECT_NE(text->find(line), std::string::npos) << line << "\nnot in:\n" << *text;
  }
}

TEST(ServerMetricsTest, AuthFailuresAndConnectionsByCredentialAreCounters) {
  CounterSources sources;
  sources.server.auth_failures = 4;
  sources.admin_auth_failures = 1;
  ServerMetricsInfo info;
  info.connections_by_credential = {{"alice", 3}, {"token", 0}};
  const StatusOr<std::string> text = metrics::Render(ServerMetricFamilies(ServerCounters(sources), info));
  ASSERT_TRUE(text.ok()) << text.status();
  for (const char* line : {
           "# TYPE rkv_server_auth_failures_total counter\n",
           "rkv_server_auth_failures_total 5\n",
           "# TYPE rkv_server_client_connections_accepted_total counter\n",
           "rkv_server_client_connections_accepted_total{credential=\"alice\"} 3\n"
           "rkv_server_client_connections_accepted_total{credential=\"token\"} 0\n",
       }) {
    EXPECT_NE(text->find(line), std::string::npos) << line << "\nnot in:\n" << *text;
  }
}

}  // namespace
}  // namespace rkv::server
