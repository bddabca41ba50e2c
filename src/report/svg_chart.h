// Line charts as inline SVG: round axis ticks, readable tick labels for tiny and huge
// values, and min/max downsampling that keeps every spike of a long run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace glint {

// An axis over [lo, hi] with ticks every `step`; lo and hi are multiples of step that
// cover the data (a "nice" step: 1, 2, 2.5 or 5 times a power of ten).
struct ChartAxis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks;  // lo, lo + step, ..., hi
};

// About `target` ticks covering [lo, hi]. A zero-width range is widened around its value.
// With `integer` the step is at least 1 (steps on the x axis).
ChartAxis nice_axis(double lo, double hi, int target, bool integer = false);

// A tick label: fixed notation with as many decimals as the step needs, grouped in
// thousands ("0.25", "1,200"; format_number), scientific for very small or very large
// magnitudes ("2.0e-4", "1.5e+7").
std::string format_tick(double v, const ChartAxis& axis);

// Reduces (x, y) to at most `max_points` points, x sorted ascending. The points are cut
// into max_points/2 buckets of consecutive points; each bucket keeps its smallest and
// its largest y, in x order. Unlike a stride, this keeps every extreme of a noisy curve
// (a loss spike at one step out of 100k stays visible) and the line still moves forward
// in x. Inputs of at most max_points points are returned unchanged.
// REQUIRES: x.size() == y.size(), max_points >= 2.
void downsample_min_max(const std::vector<double>& x, const std::vector<double>& y, size_t max_points,
                        std::vector<double>* out_x, std::vector<double>* out_y);

// One line of a chart.
struct ChartSeries {
  std::string id;     // the path's data-series attribute: "loss", "eval_loss", "tenant/support"
  std::string label;  // legend text
  std::string color;  // CSS color
  std::vector<double> x, y;
  bool dashed = false;
  bool markers = false;  // a dot at every point (sparse series such as evaluations), up to 300 points
};

struct Chart {
  std::string id;     // the svg's data-chart attribute
  std::string title;
  std::string x_label = "step";
  std::vector<ChartSeries> series;
  bool legend = false;
};

// The chart as one <svg> element. The axis ranges and the plot box are attributes
// (data-x-min, data-x-max, data-y-min, data-y-max, data-plot="left top width height"),
// and each series is a <path data-series=ID data-points=N d="M x,y L x,y ...">, so a
// reader can map every coordinate back to a value. Series with no points are left out.
std::string render_chart(const Chart& chart);

// Text for HTML and SVG content and attribute values: & < > " ' escaped.
std::string escape_html(const std::string& s);

}  // namespace glint
