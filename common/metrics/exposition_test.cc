#include "common/metrics/exposition.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace rkv::metrics {
namespace {

TEST(ExpositionTest, MetricAndLabelNames) {
  for (const char* good : {"a", "rkv_server_keys", "_x", "ns:sub:name", "A9_:"}) {
    EXPECT_TRUE(IsValidMetricName(good)) << good;
  }
  for (const char* bad : {"", "9a", "a-b", "a b", "a.b", "é", "rkv{x}"}) {
    EXPECT_FALSE(IsValidMetricName(bad)) << bad;
  }
  for (const char* good : {"op", "_x", "a9", "Code"}) EXPECT_TRUE(IsValidLabelName(good)) << good;
  for (const char* bad : {"", "9a", "a:b", "__name__", "__x", "a-b"}) EXPECT_FALSE(IsValidLabelName(bad)) << bad;
}

TEST(ExpositionTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  // HELP escapes backslash and line feed only: a quote stays.
  EXPECT_EQ(EscapeHelp("say \"hi\"\\now\nthen"), "say \"hi\"\\\\now\\nthen");
}

TEST(ExpositionTest, FormatsValues) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(1000000), "1000000");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(ExpositionTest, RendersCountersAndGaugesExactly) {
  std::vector<MetricFamily> families;
  families.push_back({"rkv_test_operations_total", "Writes applied.", MetricType::kCounter,
                      {{{{"op", "put"}}, 42}, {{{"op", "delete"}}, 3}}, {}});
  families.push_back({"rkv_test_keys", "Records in the table.", MetricType::kGauge, {{{}, 7}}, {}});
  families.push_back({"rkv_test_info", "Who: a \\ and a\nline.", MetricType::kGauge,
                      {{{{"id", "a\"b\\c\nd"}, {"transport", "tcp"}}, 1}}, {}});
  families.push_back({"rkv_test_empty", "No series.", MetricType::kGauge, {}, {}});
  const StatusOr<std::string> text = Render(families);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "# HELP rkv_test_operations_total Writes applied.\n"
            "# TYPE rkv_test_operations_total counter\n"
            "rkv_test_operations_total{op=\"put\"} 42\n"
            "rkv_test_operations_total{op=\"delete\"} 3\n"
            "# HELP rkv_test_keys Records in the table.\n"
            "# TYPE rkv_test_keys gauge\n"
            "rkv_test_keys 7\n"
            "# HELP rkv_test_info Who: a \\\\ and a\\nline.\n"
            "# TYPE rkv_test_info gauge\n"
            "rkv_test_info{id=\"a\\\"b\\\\c\\nd\",transport=\"tcp\"} 1\n"
            "# HELP rkv_test_empty No series.\n"
            "# TYPE rkv_test_empty gauge\n");
}

TEST(ExpositionTest, RendersHistogramsWithCumulativeBuckets) {
  MetricFamily h{"rkv_test_apply_seconds", "Apply latency.", MetricType::kHistogram, {}, {}};
  // 2 at or below 0.001, 5 in (0.001, 0.01], none in (0.01, 0.1], 1 above.
  h.histograms.push_back({{{"op", "put"}}, {0.001, 0.01, 0.1}, {2, 5, 0, 1}, 0.5});
  h.histograms.push_back({{}, {1}, {0, 0}, 0});
  const StatusOr<std::string> text = Render({h});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "# HELP rkv_test_apply_seconds Apply latency.\n"
            "# TYPE rkv_test_apply_seconds histogram\n"
            "rkv_test_apply_seconds_bucket{op=\"put\",le=\"0.001\"} 2\n"
            "rkv_test_apply_seconds_bucket{op=\"put\",le=\"0.01\"} 7\n"
            "rkv_test_apply_seconds_bucket{op=\"put\",le=\"0.1\"} 7\n"
            "rkv_test_apply_seconds_bucket{op=\"put\",le=\"+Inf\"} 8\n"
            "rkv_test_apply_seconds_sum{op=\"put\"} 0.5\n"
            "rkv_test_apply_seconds_count{op=\"put\"} 8\n"
            "rkv_test_apply_seconds_bucket{le=\"1\"} 0\n"
            "rkv_test_apply_seconds_bucket{le=\"+Inf\"} 0\n"
            "rkv_test_apply_seconds_sum 0\n"
            "rkv_test_apply_seconds_count 0\n");
}

TEST(ExpositionTest, RefusesWhatTheFormatCannotHold) {
  const auto refused = [](const std::vector<MetricFamily>& families, const std::string& why) {
    const StatusOr<std::string> text = Render(families);
    if (text.ok()) return ::testing::AssertionFailure() << "rendered:\n" << *text;
    if (text.status().code() != StatusCode::kInvalidArgument ||
        text.status().message().find(why) == std::string::npos) {
      return ::testing::AssertionFailure() << "refused with " << text.status() << ", not '" << why << "'";
    }
    return ::testing::AssertionSuccess();
  };
  EXPECT_TRUE(refused({{"rkv-bad", "", MetricType::kGauge, {}, {}}}, "metric family 'rkv-bad': invalid metric name"));
  EXPECT_TRUE(refused({{"9rkv", "", MetricType::kGauge, {}, {}}}, "invalid metric name"));
  EXPECT_TRUE(refused({{"rkv_a", "", MetricType::kGauge, {{{{"bad-label", "x"}}, 1}}, {}}}, "invalid label name"));
  EXPECT_TRUE(refused({{"rkv_a", "", MetricType::kGauge, {{{{"__name__", "x"}}, 1}}, {}}}, "invalid label name"));
  EXPECT_TRUE(refused({{"rkv_a", "", MetricType::kGauge, {{{{"op", "x"}, {"op", "y"}}, 1}}, {}}}, "given twice"));
  EXPECT_TRUE(refused({{"rkv_a", "", MetricType::kGauge, {}, {}}, {"rkv_a", "", MetricType::kGauge, {}, {}}},
                      "'rkv_a' given twice"));
  EXPECT_TRUE(
      refused({{"rkv_a", "", MetricType::kCounter, {}, {{{}, {1}, {0, 0}, 0}}}}, "a counter with histogram samples"));
  EXPECT_TRUE(refused({{"rkv_a", "", MetricType::kHistogram, {{{}, 1}}, {}}}, "a histogram with counter"));
  EXPECT_TRUE(refused({{"rkv_a", "", MetricType::kHistogram, {}, {{{{"le", "1"}}, {1}, {0, 0}, 0}}}}, "'le'"));
  EXPECT_TRUE(refused({{"rkv_a", "", MetricType::kHistogram, {}, {{{}, {1, 2}, {0, 0}, 0}}}}, "need 3 bucket counts"));
  EXPECT_TRUE(refused({{"rkv_a", "", MetricType::kHistogram, {}, {{{}, {2, 1}, {0, 0, 0}, 0}}}}, "not ascending"));
  EXPECT_TRUE(refused({{"rkv_a", "", MetricType::kHistogram, {}, {{{}, {1, 1}, {0, 0, 0}, 0}}}}, "not ascending"));
  EXPECT_TRUE(refused(
      {{"rkv_a", "", MetricType::kHistogram, {}, {{{}, {std::numeric_limits<double>::infinity()}, {0, 0}, 0}}}},
      "not finite"));
}

}  // namespace
}  // namespace rkv::metrics
