#include "common/metrics/metrics_endpoint.h"

#include <atomic>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>

#include "common/net_address.h"

namespace rkv::metrics {
namespace {

// Each scrape reads the counter anew: the value is the scrape's number.
class MetricsEndpointTest : public ::testing::Test {
 protected:
  MetricsEndpoint::Collect Counting() {
    return [this] {
      const double n = static_cast<double>(scrapes_.fetch_add(1) + 1);
      return std::vector<MetricFamily>{{"rkv_test_scrapes_total", "Scrapes so far.", MetricType::kCounter, {{{}, n}}, {}}};
    };
  }

  static httplib::Client ClientOf(const MetricsEndpoint& endpoint) {
    std::string host;
    uint16_t port = 0;
    EXPECT_TRUE(ParseHostPort(endpoint.address(), &host, &port).ok()) << endpoint.address();
    return httplib::Client(host, port);
  }

  std::atomic<int> scrapes_{0};
};

TEST_F(MetricsEndpointTest, ServesMetricsAtScrapeTimeAndNothingElse) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", Counting());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_TRUE((*endpoint)->address().starts_with("127.0.0.1:")) << (*endpoint)->address();
  EXPECT_NE((*endpoint)->address(), "127.0.0.1:0");
  EXPECT_EQ(scrapes_.load(), 0);  // nothing is read before a scrape
  httplib::Client client = ClientOf(**endpoint);
  for (int i = 1; i <= 2; ++i) {
    const httplib::Result res = client.Get("/metrics");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_TRUE(res->get_header_value("Content-Type").starts_with("text/plain; version=0.0.4"))
        << res->get_header_value("Content-Type");
    EXPECT_EQ(res->body,
              "# HELP rkv_test_scrapes_total Scrapes so far.\n"
              "# TYPE rkv_test_scrapes_total counter\n"
              "rkv_test_scrapes_total " + std::to_string(i) + "\n");
  }
  for (const char* path : {"/", "/other", "/metrics/x", "/metricsx"}) {
    const httplib::Result res = client.Get(path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 404) << path;
  }
  EXPECT_EQ(scrapes_.load(), 2);

  (*endpoint)->Stop();
  (*endpoint)->Stop();  // idempotent
  httplib::Client after = ClientOf(**endpoint);
  EXPECT_FALSE(after.Get("/metrics"));
}

TEST_F(MetricsEndpointTest, AFamilyTheFormatCannotHoldIsAServerError) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", [] {
    return std::vector<MetricFamily>{{"bad-name", "", MetricType::kGauge, {}, {}}};
  });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  httplib::Client client = ClientOf(**endpoint);
  const httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 500);
  EXPECT_NE(res->body.find("invalid metric name"), std::string::npos) << res->body;
}

TEST_F(MetricsEndpointTest, RefusesABadAddressAndAPortInUse) {
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:x", "127.0.0.1:70000", ":9100"}) {
    const auto endpoint = MetricsEndpoint::Start(bad, Counting());
    ASSERT_FALSE(endpoint.ok()) << bad;
    EXPECT_EQ(endpoint.status().code(), StatusCode::kInvalidArgument) << bad << ": " << endpoint.status();
  }
  EXPECT_EQ(MetricsEndpoint::Start("127.0.0.1:0", nullptr).status().code(), StatusCode::kInvalidArgument);

  auto first = MetricsEndpoint::Start("127.0.0.1:0", Counting());
  ASSERT_TRUE(first.ok()) << first.status();
  const auto second = MetricsEndpoint::Start((*first)->address(), Counting());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status();
  EXPECT_NE(second.status().message().find("cannot listen on " + (*first)->address()), std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status();
}

TEST_F(MetricsEndpointTest, DestroyingARunningEndpointStopsIt) {
  std::string address;
  {
    auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", Counting());
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    address = (*endpoint)->address();
  }
  // The port is free again: a new endpoint binds it.
  auto again = MetricsEndpoint::Start(address, Counting());
  EXPECT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace rkv::metrics
