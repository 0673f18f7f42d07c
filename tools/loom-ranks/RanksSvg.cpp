//===- RanksSvg.cpp - Draw process groups as an SVG picture ---------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "tools/loom-ranks/RanksSvg.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace loom::ranks;
using loom::rankgen::GroupList;
using loom::rankgen::RankSpan;

namespace {

// Geometry in SVG user units (pixels).
constexpr int kCellW = 46, kCellH = 38, kGap = 4;
constexpr int kPad = 14;      // inside a panel
constexpr int kPanelGap = 18; // between panels
constexpr int kTitleH = 40;   // panel title + subtitle
constexpr int kLegendLineH = 17;
constexpr int kMaxLegendLines = 8; // longer legends end with "... N more"
constexpr double kCharW = 6.4;     // average width of an 11px monospace glyph
constexpr int kMaxPictureW = 1500; // wrap panels to rows below this width

std::string escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '&':
      out += "&amp;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

/// "#rrggbb" for a colour given as hue in degrees, saturation and lightness.
std::string hsl(double h, double s, double l) {
  double c = (1 - std::fabs(2 * l - 1)) * s;
  double hp = std::fmod(h, 360.0) / 60.0;
  double x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (hp < 1) {
    r = c;
    g = x;
  } else if (hp < 2) {
    r = x;
    g = c;
  } else if (hp < 3) {
    g = c;
    b = x;
  } else if (hp < 4) {
    g = x;
    b = c;
  } else if (hp < 5) {
    r = x;
    b = c;
  } else {
    r = c;
    b = x;
  }
  double m = l - c / 2;
  char buf[8];
  snprintf(buf, sizeof(buf), "#%02x%02x%02x", int(std::lround((r + m) * 255)),
           int(std::lround((g + m) * 255)), int(std::lround((b + m) * 255)));
  return buf;
}

/// Group colours: hues a golden angle apart so neighbouring groups contrast
/// even when there are many; two lightness levels double the palette.
std::string fillColour(size_t group) {
  double hue = std::fmod(group * 137.508 + 200.0, 360.0);
  return hsl(hue, 0.62, (group / 7) % 2 ? 0.66 : 0.76);
}
std::string strokeColour(size_t group) {
  double hue = std::fmod(group * 137.508 + 200.0, 360.0);
  return hsl(hue, 0.55, 0.38);
}

std::string groupText(RankSpan ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i)
      out += ", ";
    if (i == 6 && ranks.size() > 8) {
      out += "..., " + std::to_string(ranks.back());
      break;
    }
    out += std::to_string(ranks[i]);
  }
  return out + "]";
}

struct PanelBox {
  int width = 0, height = 0;
  int legendCols = 1, legendLines = 0, entryW = 0;
  bool truncated = false;
};

} // namespace

void loom::ranks::writeSvg(llvm::raw_ostream &os, const std::string &heading,
                           int64_t worldSize, int64_t columns,
                           const std::vector<SvgPanel> &panels) {
  columns = std::max<int64_t>(1, std::min(columns, worldSize));
  int64_t rows = (worldSize + columns - 1) / columns;
  int gridW = int(columns) * (kCellW + kGap) - kGap;
  int gridH = int(rows) * (kCellH + kGap) - kGap;

  // Size every panel: the grid, then the legend in as many columns as fit.
  std::vector<PanelBox> boxes;
  for (const SvgPanel &panel : panels) {
    PanelBox box;
    size_t longest = 0;
    for (size_t g = 0; g < panel.groups->numGroups(); ++g)
      longest = std::max(longest, ("g" + std::to_string(g) + " " +
                                   groupText((*panel.groups)[g]))
                                      .size());
    box.entryW = int(longest * kCharW) + 26;
    int innerW = std::max(
        {gridW, box.entryW, 300,
         int((panel.name.size() + panel.title.size() + 4) * kCharW * 1.2)});
    box.legendCols = std::max(1, (innerW + 10) / (box.entryW + 10));
    size_t n = panel.groups->numGroups();
    size_t shown = std::min<size_t>(n, kMaxLegendLines * box.legendCols);
    box.truncated = shown < n;
    box.legendLines = int((shown + box.legendCols - 1) / box.legendCols) +
                      (box.truncated ? 1 : 0);
    box.width = innerW + 2 * kPad;
    box.height = kTitleH + gridH + 14 + box.legendLines * kLegendLineH + kPad;
    boxes.push_back(box);
  }

  // Flow the panels into rows no wider than kMaxPictureW.
  struct Placed {
    int x, y;
  };
  std::vector<Placed> placed(panels.size());
  int x = kPanelGap, y = 70, rowH = 0, pictureW = 0;
  for (size_t i = 0; i < panels.size(); ++i) {
    if (x > kPanelGap && x + boxes[i].width + kPanelGap > kMaxPictureW) {
      x = kPanelGap;
      y += rowH + kPanelGap;
      rowH = 0;
    }
    placed[i] = {x, y};
    x += boxes[i].width + kPanelGap;
    rowH = std::max(rowH, boxes[i].height);
    pictureW = std::max(pictureW, x);
  }
  int pictureH = y + rowH + kPanelGap;
  pictureW = std::max(pictureW, int(heading.size() * 9.5) + 2 * kPanelGap);

  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << pictureW
     << "\" height=\"" << pictureH << "\" viewBox=\"0 0 " << pictureW << " "
     << pictureH << "\" font-family=\"DejaVu Sans, Helvetica, Arial, "
     << "sans-serif\">\n"
     << "<title>" << escape(heading) << "</title>\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
     << "<text x=\"" << kPanelGap << "\" y=\"32\" font-size=\"20\" "
     << "font-weight=\"bold\" fill=\"#202020\">" << escape(heading)
     << "</text>\n"
     << "<text x=\"" << kPanelGap << "\" y=\"54\" font-size=\"12\" "
     << "fill=\"#505050\">Each cell is one rank (its number on top, its group "
     << "below); cells of one colour form one group. " << columns
     << " ranks per row.</text>\n";

  for (size_t p = 0; p < panels.size(); ++p) {
    const SvgPanel &panel = panels[p];
    const GroupList &groups = *panel.groups;
    const PanelBox &box = boxes[p];
    int px = placed[p].x, py = placed[p].y;

    // Which group holds each rank (-1: none, e.g. middle pipeline stages in
    // the embedding panel).
    std::vector<int64_t> groupOf(worldSize, -1);
    for (size_t g = 0; g < groups.numGroups(); ++g)
      for (int64_t r : groups[g])
        groupOf[r] = int64_t(g);

    os << "<g id=\"panel-" << escape(panel.name) << "\">\n"
       << "<rect x=\"" << px << "\" y=\"" << py << "\" width=\"" << box.width
       << "\" height=\"" << box.height << "\" rx=\"8\" fill=\"#f7f7f7\" "
       << "stroke=\"#c8c8c8\"/>\n"
       << "<text x=\"" << px + kPad << "\" y=\"" << py + 20
       << "\" font-size=\"15\" font-weight=\"bold\" fill=\"#202020\">"
       << escape(panel.name)
       << "<tspan dx=\"10\" font-weight=\"normal\" fill=\"#404040\">"
       << escape(panel.title) << "</tspan></text>\n"
       << "<text x=\"" << px + kPad << "\" y=\"" << py + 35
       << "\" font-size=\"11\" fill=\"#606060\">" << groups.numGroups()
       << (groups.numGroups() == 1 ? " group" : " groups") << " of "
       << groups.groupSize() << "</text>\n";

    int gx = px + kPad, gy = py + kTitleH;
    for (int64_t r = 0; r < worldSize; ++r) {
      int cx = gx + int(r % columns) * (kCellW + kGap);
      int cy = gy + int(r / columns) * (kCellH + kGap);
      int64_t g = groupOf[r];
      std::string fill = g < 0 ? "#ffffff" : fillColour(g);
      std::string stroke = g < 0 ? "#b0b0b0" : strokeColour(g);
      os << "<rect x=\"" << cx << "\" y=\"" << cy << "\" width=\"" << kCellW
         << "\" height=\"" << kCellH << "\" rx=\"4\" fill=\"" << fill
         << "\" stroke=\"" << stroke << "\" stroke-width=\"1.5\""
         << (g < 0 ? " stroke-dasharray=\"3,2\"" : "") << "><title>rank " << r
         << (g < 0 ? ": in no group" : ": group " + std::to_string(g))
         << "</title></rect>\n"
         << "<text x=\"" << cx + kCellW / 2 << "\" y=\"" << cy + 16
         << "\" font-size=\"13\" font-weight=\"bold\" text-anchor=\"middle\" "
         << "fill=\"" << (g < 0 ? "#a0a0a0" : "#1a1a1a") << "\">" << r
         << "</text>\n";
      if (g >= 0)
        os << "<text x=\"" << cx + kCellW / 2 << "\" y=\"" << cy + 31
           << "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#303030\">g"
           << g << "</text>\n";
    }

    // Legend: a swatch and the member list of each group.
    int ly = gy + gridH + 14;
    size_t n = groups.numGroups();
    size_t shown = std::min<size_t>(n, kMaxLegendLines * box.legendCols);
    for (size_t g = 0; g < shown; ++g) {
      int col = int(g) % box.legendCols, line = int(g) / box.legendCols;
      int ex = px + kPad + col * (box.entryW + 10);
      int ey = ly + line * kLegendLineH;
      os << "<rect x=\"" << ex << "\" y=\"" << ey << "\" width=\"12\" "
         << "height=\"12\" rx=\"2\" fill=\"" << fillColour(g) << "\" stroke=\""
         << strokeColour(g) << "\"/>\n"
         << "<text x=\"" << ex + 17 << "\" y=\"" << ey + 10
         << "\" font-size=\"11\" font-family=\"DejaVu Sans Mono, monospace\" "
         << "fill=\"#202020\">g" << g << " " << escape(groupText(groups[g]))
         << "</text>\n";
    }
    if (box.truncated)
      os << "<text x=\"" << px + kPad << "\" y=\""
         << ly + (box.legendLines - 1) * kLegendLineH + 10
         << "\" font-size=\"11\" fill=\"#606060\">... and " << n - shown
         << " more groups</text>\n";
    os << "</g>\n";
  }
  os << "</svg>\n";
}

//===----------------------------------------------------------------------===//
// Schedule timeline
//===----------------------------------------------------------------------===//

void loom::ranks::writeScheduleSvg(llvm::raw_ostream &os,
                                   const std::string &heading,
                                   const rankgen::PipelineTimeline &timeline) {
  constexpr int kLabelW = 84, kRowH = 30, kRowGap = 6, kTop = 80;
  int64_t makespan = std::max<int64_t>(timeline.makespan, 1);
  // Pixels per time unit: wide enough to label a forward, narrow enough to
  // keep long schedules on a screen.
  int unit = int(std::clamp<int64_t>(1400 / makespan, 3, 16));
  int rows = int(timeline.ranks.size());
  int chartW = int(makespan) * unit;
  int pictureW = std::max(kLabelW + chartW + 2 * kPanelGap,
                          int(heading.size() * 9.5) + 2 * kPanelGap);
  int pictureH = kTop + rows * (kRowH + kRowGap) + 40;

  char bubble[32];
  snprintf(bubble, sizeof(bubble), "%.1f", 100.0 * timeline.bubbleFraction);
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << pictureW
     << "\" height=\"" << pictureH << "\" viewBox=\"0 0 " << pictureW << " "
     << pictureH << "\" font-family=\"DejaVu Sans, Helvetica, Arial, "
     << "sans-serif\">\n"
     << "<title>" << escape(heading) << "</title>\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
     << "<text x=\"" << kPanelGap << "\" y=\"32\" font-size=\"20\" "
     << "font-weight=\"bold\" fill=\"#202020\">" << escape(heading)
     << "</text>\n"
     << "<text x=\"" << kPanelGap << "\" y=\"54\" font-size=\"12\" "
     << "fill=\"#505050\">Each row is a pp rank, time runs right. F&lt;mb&gt;."
     << "&lt;chunk&gt; is a forward, B a backward (twice as long), coloured by "
     << "micro-batch; grey gaps are the pipeline bubble (" << bubble
     << "%).</text>\n";

  int x0 = kPanelGap + kLabelW;
  for (int r = 0; r < rows; ++r) {
    int y = kTop + r * (kRowH + kRowGap);
    os << "<g id=\"rank-" << r << "\">\n"
       << "<text x=\"" << kPanelGap << "\" y=\"" << y + kRowH / 2 + 5
       << "\" font-size=\"13\" font-weight=\"bold\" fill=\"#202020\">pp rank "
       << r << "</text>\n"
       << "<rect x=\"" << x0 << "\" y=\"" << y << "\" width=\"" << chartW
       << "\" height=\"" << kRowH << "\" fill=\"#e4e4e4\"><title>pp rank " << r
       << ": idle</title></rect>\n";
    for (const rankgen::TimedStep &t : timeline.ranks[size_t(r)]) {
      int x = x0 + int(t.start) * unit, w = int(t.end - t.start) * unit;
      double hue =
          std::fmod(double(t.step.microbatch) * 137.508 + 200.0, 360.0);
      std::string fill = hsl(hue, 0.62, t.step.forward ? 0.78 : 0.58);
      std::string label = t.step.str();
      os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w
         << "\" height=\"" << kRowH << "\" fill=\"" << fill << "\" stroke=\""
         << hsl(hue, 0.55, 0.32) << "\" stroke-width=\"1\"><title>" << label
         << ": time " << t.start << "-" << t.end << "</title></rect>\n";
      if (w >= int(label.size() * 6.5) + 2)
        os << "<text x=\"" << x + w / 2 << "\" y=\"" << y + kRowH / 2 + 4
           << "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#1a1a1a\">"
           << label << "</text>\n";
    }
    os << "</g>\n";
  }
  // A time axis under the rows.
  int axisY = kTop + rows * (kRowH + kRowGap) + 4;
  int64_t tick = std::max<int64_t>(1, (80 + unit - 1) / unit);
  for (int64_t t = 0; t <= makespan; t += tick)
    os << "<text x=\"" << x0 + int(t) * unit << "\" y=\"" << axisY + 12
       << "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#606060\">" << t
       << "</text>\n";
  os << "</svg>\n";
}
