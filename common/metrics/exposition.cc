#include "common/metrics/exposition.h"

#include <charconv>
#include <cmath>
#include <set>

namespace rkv::metrics {
namespace {

bool IsNameStart(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}

bool IsNameChar(char c, bool colon) { return IsNameStart(c, colon) || (c >= '0' && c <= '9'); }

bool IsValidName(std::string_view name, bool colon) {
  if (name.empty() || !IsNameStart(name[0], colon)) return false;
  for (const char c : name) {
    if (!IsNameChar(c, colon)) return false;
  }
  return true;
}

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// Checks one series' labels: valid names, each once, and no "le" on a
// histogram's (`reserved_le`).
Status CheckLabels(const std::vector<Label>& labels, bool reserved_le) {
  std::set<std::string_view> seen;
  for (const Label& l : labels) {
    if (!IsValidLabelName(l.name)) return InvalidArgument("invalid label name '" + l.name + "'");
    if (reserved_le && l.name == "le") return InvalidArgument("a histogram's series may not have a label 'le'");
    if (!seen.insert(l.name).second) return InvalidArgument("label '" + l.name + "' given twice in one series");
  }
  return Status::Ok();
}

Status CheckHistogram(const HistogramSample& h) {
  if (h.bucket_counts.size() != h.upper_bounds.size() + 1) {
    return InvalidArgument(std::to_string(h.upper_bounds.size()) + " bucket bounds need " +
                           std::to_string(h.upper_bounds.size() + 1) + " bucket counts, not " +
                           std::to_string(h.bucket_counts.size()));
  }
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    if (!std::isfinite(h.upper_bounds[i])) return InvalidArgument("a bucket bound is not finite");
    if (i > 0 && !(h.upper_bounds[i - 1] < h.upper_bounds[i])) {
      return InvalidArgument("bucket bounds are not ascending and distinct");
    }
  }
  return Status::Ok();
}

// `{a="x",b="y"}` (with `extra` last when given), or "" for no labels.
void AppendLabels(const std::vector<Label>& labels, const Label* extra, std::string* out) {
  if (labels.empty() && extra == nullptr) return;
  out->push_back('{');
  bool first = true;
  const auto append = [&](const Label& l) {
    if (!first) out->push_back(',');
    first = false;
    out->append(l.name);
    out->append("=\"");
    out->append(EscapeLabelValue(l.value));
    out->push_back('"');
  };
  for (const Label& l : labels) append(l);
  if (extra != nullptr) append(*extra);
  out->push_back('}');
}

void AppendLine(std::string_view name, const std::vector<Label>& labels, const Label* extra, double value,
                std::string* out) {
  out->append(name);
  AppendLabels(labels, extra, out);
  out->push_back(' ');
  out->append(FormatValue(value));
  out->push_back('\n');
}

Status CheckFamily(const MetricFamily& f) {
  if (!IsValidMetricName(f.name)) return InvalidArgument("invalid metric name");
  if (f.type == MetricType::kHistogram) {
    if (!f.samples.empty()) return InvalidArgument("a histogram with counter or gauge samples");
    for (const HistogramSample& h : f.histograms) {
      RKV_RETURN_IF_ERROR(CheckLabels(h.labels, /*reserved_le=*/true));
      RKV_RETURN_IF_ERROR(CheckHistogram(h));
    }
    return Status::Ok();
  }
  if (!f.histograms.empty()) return InvalidArgument("a " + std::string(TypeName(f.type)) + " with histogram samples");
  for (const Sample& s : f.samples) RKV_RETURN_IF_ERROR(CheckLabels(s.labels, /*reserved_le=*/false));
  return Status::Ok();
}

}  // namespace

bool IsValidMetricName(std::string_view name) { return IsValidName(name, /*colon=*/true); }

bool IsValidLabelName(std::string_view name) {
  return IsValidName(name, /*colon=*/false) && !name.starts_with("__");
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '\\':
        out.append("\\\\");
        break;
      case '"':
        out.append("\\\"");
        break;
      case '\n':
        out.append("\\n");
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (const char c : help) {
    if (c == '\\') {
      out.append("\\\\");
    } else if (c == '\n') {
      out.append("\\n");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // Integers below 2^53 are exact in a double: plain digits, never "1e+06".
  const std::chars_format format = (value == std::trunc(value) && std::fabs(value) < 0x1p53)
                                       ? std::chars_format::fixed
                                       : std::chars_format::general;
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, format);
  if (ec != std::errc()) return "NaN";  // cannot happen: 64 bytes hold any double
  return std::string(buf, end);
}

StatusOr<std::string> Render(const std::vector<MetricFamily>& families) {
  std::set<std::string_view> names;
  for (const MetricFamily& f : families) {
    if (Status s = CheckFamily(f); !s.ok()) return s.WithContext("metric family '" + f.name + "'");
    if (!names.insert(f.name).second) return InvalidArgument("metric family '" + f.name + "' given twice");
  }
  std::string out;
  for (const MetricFamily& f : families) {
    out.append("# HELP ").append(f.name).append(" ").append(EscapeHelp(f.help)).append("\n");
    out.append("# TYPE ").append(f.name).append(" ").append(TypeName(f.type)).append("\n");
    for (const Sample& s : f.samples) AppendLine(f.name, s.labels, nullptr, s.value, &out);
    for (const HistogramSample& h : f.histograms) {
      const std::string bucket = f.name + "_bucket";
      uint64_t cumulative = 0;
      for (size_t i = 0; i < h.bucket_counts.size(); ++i) {
        cumulative += h.bucket_counts[i];
        const Label le{"le", i < h.upper_bounds.size() ? FormatValue(h.upper_bounds[i]) : "+Inf"};
        AppendLine(bucket, h.labels, &le, static_cast<double>(cumulative), &out);
      }
      AppendLine(f.name + "_sum", h.labels, nullptr, h.sum, &out);
      AppendLine(f.name + "_count", h.labels, nullptr, static_cast<double>(cumulative), &out);
    }
  }
  return out;
}

}  // namespace rkv::metrics
