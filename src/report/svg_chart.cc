#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "train/metrics.h"

namespace glint {

namespace {

// Chart geometry in SVG user units (the page shows the svg at this size or narrower).
constexpr double kWidth = 960;
constexpr double kLeft = 76, kRight = 24, kBottom = 46, kPlotHeight = 220;
constexpr double kTitleBand = 30, kLegendRow = 18;
constexpr size_t kMaxMarkers = 300;

// The power of ten at or below |v| (v != 0).
double decade(double v) { return std::pow(10.0, std::floor(std::log10(std::abs(v)) + 1e-9)); }

bool is_two_and_a_half(double step) { return std::abs(step / decade(step) - 2.5) < 1e-6; }

std::string fmt(const char* spec, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

// "2.0e-04" -> "2.0e-4", "1.5e+07" -> "1.5e+7".
std::string short_exponent(std::string s) {
  size_t e = s.find('e');
  if (e == std::string::npos || e + 2 >= s.size()) return s;
  size_t digits = e + 2;
  while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
  return s;
}

// Dots where they can be told apart (a few hundred over the width); a single point
// always gets one, as a path of one point draws nothing.
bool draws_markers(const ChartSeries& s) { return (s.markers && s.x.size() <= kMaxMarkers) || s.x.size() == 1; }

}  // namespace

ChartAxis nice_axis(double lo, double hi, int target, bool integer) {
  GLINT_ASSERT(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "axis range [", lo, ", ", hi, "]");
  // A range within rounding of one value (a constant learning rate, say) is one value:
  // steps below the values' resolution would never advance the tick loop.
  const double scale = std::max(std::abs(lo), std::abs(hi));
  if (!(hi - lo > 1e-9 * scale)) {
    const double pad = integer ? 1.0 : (scale == 0 ? 1.0 : scale * 0.1);
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = decade(raw);
  double step = 10 * mag;
  const std::vector<double> nice = integer ? std::vector<double>{1, 2, 5, 10} : std::vector<double>{1, 2, 2.5, 5, 10};
  for (double m : nice) {
    if (raw <= m * mag * (1 + 1e-9)) {
      step = m * mag;
      break;
    }
  }
  if (integer) step = std::max(step, 1.0);
  const double a = std::floor(lo / step + 1e-9), b = std::ceil(hi / step - 1e-9);
  ChartAxis axis;
  axis.step = step;
  axis.lo = a * step;
  axis.hi = b * step;
  const int64_t n = std::min<int64_t>(int64_t(b - a), 1000);  // target ticks, never unbounded
  for (int64_t k = 0; k <= n; ++k) axis.ticks.push_back((a + double(k)) * step);
  return axis;
}

std::string format_tick(double v, const ChartAxis& axis) {
  if (std::abs(v) < axis.step * 1e-9) return "0";
  const double mag = std::max(std::abs(axis.lo), std::abs(axis.hi));
  const int extra = is_two_and_a_half(axis.step) ? 1 : 0;
  const int step_exp = int(std::floor(std::log10(axis.step) + 1e-9));
  if (mag < 1e-3 || mag >= 1e6) {
    const int mag_exp = int(std::floor(std::log10(mag) + 1e-9));
    const int digits = std::clamp(mag_exp - step_exp + extra, 1, 6);
    return short_exponent(fmt(("%." + std::to_string(digits) + "e").c_str(), v));
  }
  const int decimals = std::clamp(-step_exp + (step_exp <= 0 ? extra : 0), 0, 10);
  return format_number(v, decimals);
}

void downsample_min_max(const std::vector<double>& x, const std::vector<double>& y, size_t max_points,
                        std::vector<double>* out_x, std::vector<double>* out_y) {
  GLINT_ASSERT(x.size() == y.size() && max_points >= 2, "downsample: ", x.size(), " x, ", y.size(), " y, max ",
               max_points);
  out_x->clear();
  out_y->clear();
  const size_t n = x.size();
  if (n <= max_points) {
    *out_x = x;
    *out_y = y;
    return;
  }
  const size_t buckets = max_points / 2;
  out_x->reserve(2 * buckets);
  out_y->reserve(2 * buckets);
  for (size_t b = 0; b < buckets; ++b) {
    const size_t begin = b * n / buckets, end = (b + 1) * n / buckets;
    size_t lo = begin, hi = begin;
    for (size_t i = begin; i < end; ++i) {
      if (y[i] < y[lo]) lo = i;
      if (y[i] > y[hi]) hi = i;
    }
    for (size_t i : {std::min(lo, hi), std::max(lo, hi)}) {
      out_x->push_back(x[i]);
      out_y->push_back(y[i]);
      if (lo == hi) break;
    }
  }
}

std::string escape_html(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_chart(const Chart& chart) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const ChartSeries& s : chart.series) {
    GLINT_ASSERT(s.x.size() == s.y.size(), "series ", s.id, ": ", s.x.size(), " x, ", s.y.size(), " y");
    for (size_t i = 0; i < s.x.size(); ++i) {
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  }
  if (!(x_lo <= x_hi)) x_lo = x_hi = y_lo = y_hi = 0;  // no points at all: an empty frame
  const ChartAxis xa = nice_axis(x_lo, x_hi, 10, /*integer=*/true);
  const ChartAxis ya = nice_axis(y_lo, y_hi, 5);

  // The legend: items left to right under the title, wrapping to further rows.
  struct Item {
    const ChartSeries* s;
    double x, y;
  };
  std::vector<Item> legend;
  double lx = kLeft, ly = kTitleBand + 4;
  if (chart.legend) {
    for (const ChartSeries& s : chart.series) {
      const double w = 28 + 7.2 * double(s.label.size()) + 18;
      if (lx + w > kWidth - kRight && lx > kLeft) {
        lx = kLeft;
        ly += kLegendRow;
      }
      legend.push_back({&s, lx, ly});
      lx += w;
    }
  }
  const double top = kTitleBand + (legend.empty() ? 0 : ly - kTitleBand + kLegendRow) + 8;
  const double pw = kWidth - kLeft - kRight, ph = kPlotHeight;
  const double height = top + ph + kBottom;
  auto px = [&](double v) { return kLeft + (v - xa.lo) / (xa.hi - xa.lo) * pw; };
  auto py = [&](double v) { return top + (1 - (v - ya.lo) / (ya.hi - ya.lo)) * ph; };
  auto num = [](double v) { return fmt("%.2f", v); };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-chart=\"" << escape_html(chart.id)
    << "\" viewBox=\"0 0 " << kWidth << " " << num(height) << "\" width=\"" << kWidth << "\" height=\""
    << num(height) << "\" data-x-min=\"" << fmt("%.17g", xa.lo) << "\" data-x-max=\"" << fmt("%.17g", xa.hi)
    << "\" data-y-min=\"" << fmt("%.17g", ya.lo) << "\" data-y-max=\"" << fmt("%.17g", ya.hi)
    << "\" data-plot=\"" << kLeft << " " << num(top) << " " << pw << " " << ph << "\" role=\"img\">\n";
  o << "<title>" << escape_html(chart.title) << "</title>\n";
  o << "<text class=\"title\" x=\"" << kLeft << "\" y=\"20\">" << escape_html(chart.title) << "</text>\n";
  // Markers: one dot per series that wants them (ids unique on the page).
  o << "<defs>";
  for (size_t i = 0; i < chart.series.size(); ++i) {
    o << "<marker id=\"dot-" << escape_html(chart.id) << "-" << i
      << "\" viewBox=\"0 0 8 8\" refX=\"4\" refY=\"4\" markerWidth=\"8\" markerHeight=\"8\" "
         "markerUnits=\"userSpaceOnUse\"><circle cx=\"4\" cy=\"4\" r=\"3\" fill=\""
      << escape_html(chart.series[i].color) << "\"/></marker>";
  }
  o << "</defs>\n";
  // Grid, ticks and their labels.
  o << "<g class=\"grid\">";
  for (double t : ya.ticks) o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << num(py(t)) << "\" y2=\"" << num(py(t)) << "\"/>";
  for (double t : xa.ticks) o << "<line x1=\"" << num(px(t)) << "\" x2=\"" << num(px(t)) << "\" y1=\"" << num(top) << "\" y2=\"" << num(top + ph) << "\"/>";
  o << "</g>\n<g class=\"ticks y\">";
  for (double t : ya.ticks)
    o << "<text x=\"" << kLeft - 6 << "\" y=\"" << num(py(t) + 4) << "\">" << format_tick(t, ya) << "</text>";
  o << "</g>\n<g class=\"ticks x\">";
  for (double t : xa.ticks)
    o << "<text x=\"" << num(px(t)) << "\" y=\"" << num(top + ph + 16) << "\">" << format_tick(t, xa) << "</text>";
  o << "</g>\n";
  o << "<rect class=\"frame\" x=\"" << kLeft << "\" y=\"" << num(top) << "\" width=\"" << pw << "\" height=\"" << ph << "\"/>\n";
  o << "<text class=\"axis-label\" x=\"" << num(kLeft + pw / 2) << "\" y=\"" << num(top + ph + 38) << "\">"
    << escape_html(chart.x_label) << "</text>\n";
  // The series.
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    if (s.x.empty()) continue;
    o << "<path data-series=\"" << escape_html(s.id) << "\" data-points=\"" << s.x.size() << "\" stroke=\""
      << escape_html(s.color) << "\"";
    if (s.dashed) o << " stroke-dasharray=\"5 4\"";
    if (draws_markers(s)) {
      const std::string url = "url(#dot-" + escape_html(chart.id) + "-" + std::to_string(i) + ")";
      o << " marker-start=\"" << url << "\" marker-mid=\"" << url << "\" marker-end=\"" << url << "\"";
    }
    o << " d=\"";
    for (size_t k = 0; k < s.x.size(); ++k) o << (k == 0 ? "M" : " L") << num(px(s.x[k])) << "," << num(py(s.y[k]));
    o << "\"/>\n";
  }
  // The legend.
  for (const Item& it : legend) {
    o << "<g class=\"legend\"><line x1=\"" << num(it.x) << "\" x2=\"" << num(it.x + 22) << "\" y1=\"" << num(it.y)
      << "\" y2=\"" << num(it.y) << "\" stroke=\"" << escape_html(it.s->color) << "\"";
    if (it.s->dashed) o << " stroke-dasharray=\"5 4\"";
    o << "/>";
    if (draws_markers(*it.s))
      o << "<circle cx=\"" << num(it.x + 11) << "\" cy=\"" << num(it.y) << "\" r=\"3\" fill=\""
        << escape_html(it.s->color) << "\"/>";
    o << "<text x=\"" << num(it.x + 28) << "\" y=\"" << num(it.y + 4) << "\">" << escape_html(it.s->label)
      << "</text></g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace glint
