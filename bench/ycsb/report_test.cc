#include "bench/ycsb/report.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "bench/ycsb/progress.h"

namespace rkv::bench {
namespace {

RunParameters Params(std::string_view workload) {
  RunParameters p;
  p.label = "rkv-a";
  p.target = "rkv";
  p.server = "127.0.0.1:7700";
  p.workload = *FindWorkload(workload);
  p.distribution = KeyDistribution::kZipfian;
  p.records = 1000;
  p.operations = 3;
  p.value_bytes = 1024;
  p.threads = 2;
  return p;
}

RunFigures Figures() {
  RunFigures f;
  f.run_s = 2.0;
  f.result.ops = 3;
  f.result.Of(OpType::kRead).Record(10'000);
  f.result.Of(OpType::kRead).Record(20'000);
  f.result.Of(OpType::kUpdate).Record(30'000);
  return f;
}

TEST(ReportTest, ParsesFormats) {
  EXPECT_EQ(*ParseOutputFormat("text"), OutputFormat::kText);
  EXPECT_EQ(*ParseOutputFormat("json"), OutputFormat::kJson);
  EXPECT_EQ(*ParseOutputFormat("csv"), OutputFormat::kCsv);
  EXPECT_FALSE(ParseOutputFormat("xml").ok());
}

TEST(ReportTest, OutputLineKeepsItsColumns) {
  const std::string line = OutputLine(Params("a"), Figures());
  EXPECT_EQ(line, "rkv-a a 1024 2 3 2 10.0 20.0 30.0 30.0 0 1 - -");
  std::istringstream header{std::string(OutputLineHeader())};
  std::vector<std::string> columns;
  for (std::string w; header >> w;) columns.push_back(w);
  EXPECT_EQ(columns.size(), 15u);  // '#' and 14 names, one per field
}

TEST(ReportTest, JsonHasTheParametersAndEveryKind) {
  const std::string json = JsonReport(Params("a"), Figures());
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  for (const char* want : {"\"workload\":\"a\"", "\"key_distribution\":\"zipfian\"", "\"threads\":2",
                           "\"ops\":3", "\"rmw_conflicts\":0", "\"get\":{\"count\":2", "\"put\":{\"count\":1",
                           "\"p99_9_us\":", "\"max_us\":30.0"}) {
    EXPECT_NE(json.find(want), std::string::npos) << want << " in " << json;
  }
  EXPECT_EQ(json.find("\"rmw\""), std::string::npos);
}

TEST(ReportTest, CsvHasAHeaderAndOneRowPerKind) {
  RunFigures f = Figures();
  f.result.Of(OpType::kReadModifyWrite).Record(40'000);
  f.result.rmw_conflicts = 7;
  const std::string rows = CsvRows(Params("f"), f);
  // f: get and rmw; the put has figures too, so it is listed.
  EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 3);
  // The run's errors and conflicts, then the kind's figures.
  EXPECT_NE(rows.find(",0,7,rmw,1,40.0,"), std::string::npos) << rows;
  EXPECT_NE(CsvHeader().find(",errors,rmw_conflicts,op,"), std::string::npos);
  const std::string header = CsvHeader();
  const auto fields = [](const std::string& line) { return std::count(line.begin(), line.end(), ','); };
  EXPECT_EQ(fields(header), fields(rows.substr(0, rows.find('\n') + 1)));
}

TEST(ReportTest, TextLineKeepsTheFormatScriptsParse) {
  Histogram h;
  h.Record(12'300);
  const std::string line = TextLatencyLine(OpType::kRead, h);
  EXPECT_EQ(line.rfind("  GET ", 0), 0u) << line;
  EXPECT_NE(line.find(" 1 ok   mean     12.3  p50     12.3  p90"), std::string::npos) << line;
  EXPECT_EQ(TextLatencyLine(OpType::kInsert, Histogram()), "");
}

TEST(ReportTest, TextGivesTheConflictsOfReadModifyWrites) {
  RunFigures f = Figures();
  f.result.rmw_conflicts = 12;
  EXPECT_EQ(TextConflictsLine(Params("f"), f.result), "  read-modify-write conflicts retried: 12");
  EXPECT_EQ(TextConflictsLine(Params("f"), ThreadResult()), "  read-modify-write conflicts retried: 0");
  // Other workloads have no read-modify-write: no line.
  EXPECT_EQ(TextConflictsLine(Params("a"), ThreadResult()), "");
}

TEST(ProgressTest, LiveCountsGiveTheIntervalsP99) {
  LiveCounters c;
  for (int i = 0; i < 99; ++i) c.Record(1'000);
  c.Record(1'000'000);
  std::vector<uint64_t> counts(LiveCounters::Buckets::kCount, 0);
  c.AddTo(counts);
  EXPECT_EQ(c.ops(), 100u);
  const uint64_t p99 = LiveCountsPercentile(counts, 99);
  EXPECT_NEAR(static_cast<double>(p99), 1'000.0, 1'000.0 * LiveCounters::Buckets::kMaxRelativeError);
  EXPECT_NEAR(static_cast<double>(LiveCountsPercentile(counts, 100)), 1e6, 1e6 / 32);
  const std::string line = ProgressLine(4, 4000, 1000, 1.0, 12'000, 15'000);
  EXPECT_NE(line.find("4000 ops, 1000 ops/s"), std::string::npos) << line;
  EXPECT_NE(line.find("p99 12.0 us"), std::string::npos) << line;
}

}  // namespace
}  // namespace rkv::bench
