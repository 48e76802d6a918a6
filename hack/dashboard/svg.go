package main

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/retryops/retry-operator/internal/dashboard"
)

// The page: Grafana's 24-column grid, each grid unit of height unitH pixels.
const (
	pageW   = 1800
	margin  = 16
	colW    = float64(pageW-2*margin) / 24
	panelH  = 260
	rowH    = 34
	gap     = 8
	headerH = 70
)

// Grafana's named colors and its classic series palette.
var (
	namedColors = map[string]string{"green": "#56A64B", "orange": "#FF9830", "red": "#E02F44", "yellow": "#F2CC0C"}
	palette     = []string{"#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A6", "#705DA0", "#508642", "#CCA300"}
)

func color(name string) string {
	if c, ok := namedColors[name]; ok {
		return c
	}
	return name
}

type canvas struct{ strings.Builder }

func (c *canvas) f(format string, args ...any) { fmt.Fprintf(&c.Builder, format, args...) }

func (c *canvas) text(x, y float64, size int, fill, anchor, weight, s string) {
	c.f(`<text x="%.1f" y="%.1f" font-size="%d" fill="%s" text-anchor="%s" font-weight="%s">%s</text>`+"\n", x, y, size, fill, anchor, weight, html.EscapeString(s))
}

// drawDashboard lays the panels out as Grafana does (rows, then panels left to right) and draws them.
func drawDashboard(panels []panelData, start, end time.Time, caption string) string {
	var body canvas
	y := float64(headerH)
	x := 0.0
	row := ""
	for _, p := range panels {
		if p.Row != row {
			if x > 0 {
				y += panelH + gap
			}
			row, x = p.Row, 0
			body.text(margin, y+22, 18, "#1F2328", "start", "bold", "▾ "+row)
			y += rowH
		}
		w := colW * float64(p.Width)
		if x+float64(p.Width) > 24 {
			x, y = 0, y+panelH+gap
		}
		drawPanel(&body, p, margin+x*colW, y, w-gap, panelH, start, end)
		x += float64(p.Width)
	}
	height := y + panelH + margin
	var c canvas
	c.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="Inter, Helvetica, Arial, sans-serif">`+"\n", pageW, height, pageW, height)
	c.f(`<rect width="100%%" height="100%%" fill="#F4F5F5"/>` + "\n")
	c.text(margin, 32, 24, "#1F2328", "start", "bold", dashboard.Title)
	c.text(margin, 56, 13, "#5A6270", "start", "normal", caption+"   ·   namespace, pipeline and queue: All")
	c.WriteString(body.String())
	c.f("</svg>\n")
	return c.String()
}

func drawPanel(c *canvas, p panelData, x, y, w, h float64, start, end time.Time) {
	c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="4" fill="#FFFFFF" stroke="#D8D9DA"/>`+"\n", x, y, w, h)
	c.text(x+10, y+20, 14, "#1F2328", "start", "bold", p.Title)
	inner := box{x + 10, y + 32, w - 20, h - 42}
	if len(p.Series) == 0 || allEmpty(p.Series) {
		c.text(x+w/2, y+h/2, 16, "#8E8E8E", "middle", "normal", "No data")
		return
	}
	switch p.Kind {
	case dashboard.Gauge:
		drawGauges(c, p, inner)
	case dashboard.StateTimeline:
		drawStates(c, p, inner, start, end)
	case dashboard.Heatmap:
		drawHeatmap(c, p, inner, start, end)
	default:
		drawTimeSeries(c, p, inner, start, end)
	}
}

type box struct{ x, y, w, h float64 }

func allEmpty(ss []series) bool {
	for _, s := range ss {
		if len(s.Values) > 0 {
			return false
		}
	}
	return true
}

// legendRows draws the series' legends under a plot, as many as fit, and returns their height.
func drawLegend(c *canvas, names []string, b box) {
	x, y := b.x, b.y+12
	for i, n := range names {
		label := n
		width := 22 + 6.6*float64(len(label))
		if x+width > b.x+b.w {
			x, y = b.x, y+16
			if y > b.y+b.h {
				c.text(b.x+b.w, b.y+12, 11, "#5A6270", "end", "normal", fmt.Sprintf("+%d more", len(names)-i))
				return
			}
		}
		c.f(`<rect x="%.1f" y="%.1f" width="12" height="4" fill="%s"/>`+"\n", x, y-5, palette[i%len(palette)])
		c.text(x+16, y, 11, "#3D434D", "start", "normal", label)
		x += width
	}
}

func drawTimeSeries(c *canvas, p panelData, b box, start, end time.Time) {
	legendH := 36.0
	plot := box{b.x + 58, b.y, b.w - 58, b.h - legendH - 16}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for _, v := range s.Values {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	lo = math.Min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	hi = niceCeil(hi)
	yOf := func(v float64) float64 { return plot.y + plot.h - (v-lo)/(hi-lo)*plot.h }
	xOf := func(t time.Time) float64 {
		return plot.x + float64(t.Sub(start))/float64(end.Sub(start))*plot.w
	}
	for i := range 5 {
		v := lo + (hi-lo)*float64(i)/4
		yy := yOf(v)
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ECEDEE"/>`+"\n", plot.x, yy, plot.x+plot.w, yy)
		c.text(plot.x-6, yy+4, 11, "#5A6270", "end", "normal", formatValue(v, p.Unit))
	}
	drawTimeAxis(c, plot, start, end)
	for _, t := range p.Thresholds {
		if math.IsInf(t.Value, -1) || t.Value > hi {
			continue
		}
		yy := yOf(t.Value)
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="6 4"/>`+"\n", plot.x, yy, plot.x+plot.w, yy, color(t.Color))
	}
	var names []string
	for i, s := range p.Series {
		names = append(names, s.Legend)
		var pts []string
		for j, v := range s.Values {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(s.Times[j]), yOf(v)))
		}
		c.f(`<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`+"\n", palette[i%len(palette)], strings.Join(pts, " "))
	}
	drawLegend(c, names, box{b.x, b.y + b.h - legendH, b.w, legendH})
}

func drawTimeAxis(c *canvas, plot box, start, end time.Time) {
	span := end.Sub(start)
	tick := time.Minute
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour} {
		tick = d
		if span/d <= 8 {
			break
		}
	}
	for t := start.Truncate(tick).Add(tick); t.Before(end); t = t.Add(tick) {
		xx := plot.x + float64(t.Sub(start))/float64(span)*plot.w
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ECEDEE"/>`+"\n", xx, plot.y, xx, plot.y+plot.h)
		c.text(xx, plot.y+plot.h+14, 11, "#5A6270", "middle", "normal", t.UTC().Format("15:04"))
	}
}

// drawGauges draws one arc per series (its last value), colored by the threshold it reached.
func drawGauges(c *canvas, p panelData, b box) {
	n := len(p.Series)
	cols := int(math.Ceil(math.Sqrt(float64(n))))
	rows := (n + cols - 1) / cols
	cw, ch := b.w/float64(cols), b.h/float64(rows)
	maxV := 1.0
	if len(p.Thresholds) > 0 {
		maxV = 2 * p.Thresholds[len(p.Thresholds)-1].Value
	}
	for i, s := range p.Series {
		cx := b.x + cw*(float64(i%cols)+0.5)
		cy := b.y + ch*float64(i/cols) + ch*0.62
		r := math.Min(cw*0.4, ch*0.5)
		v := s.Values[len(s.Values)-1]
		// The thresholds as a thin outer band, the value as the thick arc.
		for j, t := range p.Thresholds {
			from := math.Max(t.Value, 0)
			to := maxV
			if j+1 < len(p.Thresholds) {
				to = p.Thresholds[j+1].Value
			}
			arc(c, cx, cy, r+5, from/maxV, math.Min(to, maxV)/maxV, color(t.Color), 3)
		}
		arc(c, cx, cy, r-8, 0, 1, "#ECEDEE", 14)
		arc(c, cx, cy, r-8, 0, math.Min(v, maxV)/maxV, color(thresholdColor(p.Thresholds, v)), 14)
		c.text(cx, cy-4, int(math.Max(14, r/3)), color(thresholdColor(p.Thresholds, v)), "middle", "bold", formatValue(v, p.Unit))
		c.text(cx, cy+14, 11, "#3D434D", "middle", "normal", s.Legend)
	}
}

// arc draws the part [from, to] (fractions) of a half circle opening downwards.
func arc(c *canvas, cx, cy, r, from, to float64, stroke string, width float64) {
	if to <= from {
		return
	}
	a0, a1 := math.Pi*(1-from), math.Pi*(1-to)
	x0, y0 := cx+r*math.Cos(a0), cy-r*math.Sin(a0)
	x1, y1 := cx+r*math.Cos(a1), cy-r*math.Sin(a1)
	c.f(`<path d="M %.1f %.1f A %.1f %.1f 0 0 1 %.1f %.1f" fill="none" stroke="%s" stroke-width="%.0f"/>`+"\n", x0, y0, r, r, x1, y1, stroke, width)
}

func thresholdColor(steps []dashboard.Step, v float64) string {
	c := "green"
	for _, s := range steps {
		if v >= s.Value {
			c = s.Color
		}
	}
	return c
}

// drawStates draws one band per series, each point's state in its color.
func drawStates(c *canvas, p panelData, b box, start, end time.Time) {
	labelW := 190.0
	plot := box{b.x + labelW, b.y, b.w - labelW, b.h - 40}
	bandH := math.Min(36, plot.h/float64(len(p.Series)))
	xOf := func(t time.Time) float64 { return plot.x + float64(t.Sub(start))/float64(end.Sub(start))*plot.w }
	for i, s := range p.Series {
		yy := plot.y + float64(i)*bandH
		c.text(plot.x-8, yy+bandH/2+4, 11, "#3D434D", "end", "normal", s.Legend)
		for j, v := range s.Values {
			x0 := xOf(s.Times[j])
			x1 := plot.x + plot.w
			if j+1 < len(s.Times) {
				x1 = xOf(s.Times[j+1])
			}
			c.f(`<rect x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="%s"/>`+"\n", x0, yy+2, math.Max(x1-x0, 0)+0.6, bandH-4, color(stateOf(p.States, v).Color))
		}
	}
	axis := box{plot.x, plot.y, plot.w, float64(len(p.Series)) * bandH}
	drawTimeAxis(c, axis, start, end)
	lx := b.x
	for _, s := range p.States {
		c.f(`<rect x="%.1f" y="%.1f" width="12" height="8" fill="%s"/>`+"\n", lx, b.y+b.h-12, color(s.Color))
		c.text(lx+16, b.y+b.h-4, 11, "#3D434D", "start", "normal", s.Text)
		lx += 90
	}
}

func stateOf(states []dashboard.State, v float64) dashboard.State {
	for _, s := range states {
		if float64(s.Value) == v {
			return s
		}
	}
	return dashboard.State{Text: strconv.FormatFloat(v, 'g', -1, 64), Color: "#8E8E8E"}
}

// drawHeatmap draws the buckets' rates (cumulative by le, as Prometheus keeps them) per bucket.
func drawHeatmap(c *canvas, p panelData, b box, start, end time.Time) {
	type bucket struct {
		le float64
		s  series
	}
	var buckets []bucket
	for _, s := range p.Series {
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err == nil {
			buckets = append(buckets, bucket{le, s})
		}
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	plot := box{b.x + 58, b.y, b.w - 58, b.h - 36}
	cellH := plot.h / float64(len(buckets))
	xOf := func(t time.Time) float64 { return plot.x + float64(t.Sub(start))/float64(end.Sub(start))*plot.w }
	// The count in each bucket alone: its cumulative rate minus the one below, at the same time.
	cells := make([]map[int64]float64, len(buckets))
	peak := 0.0
	for i, bk := range buckets {
		cells[i] = map[int64]float64{}
		for j, t := range bk.s.Times {
			v := bk.s.Values[j]
			if i > 0 {
				v -= lookup(buckets[i-1].s, t)
			}
			cells[i][t.Unix()] = v
			peak = math.Max(peak, v)
		}
	}
	for i, bk := range buckets {
		yy := plot.y + plot.h - float64(i+1)*cellH
		for j, t := range bk.s.Times {
			v := cells[i][t.Unix()]
			if v <= 0 || peak == 0 {
				continue
			}
			x1 := plot.x + plot.w
			if j+1 < len(bk.s.Times) {
				x1 = xOf(bk.s.Times[j+1])
			}
			// Log-scaled intensity, so that the few slow deliveries still show.
			a := math.Log1p(v) / math.Log1p(peak)
			c.f(`<rect x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="#FF7A00" fill-opacity="%.2f"/>`+"\n", xOf(t), yy, math.Max(x1-xOf(t), 0)+0.6, cellH-1, 0.08+0.92*a)
		}
		if len(buckets) <= 16 || i%2 == 0 {
			label := "+Inf"
			if !math.IsInf(bk.le, 1) {
				label = formatValue(bk.le, p.Unit)
			}
			c.text(plot.x-6, yy+cellH/2+4, 10, "#5A6270", "end", "normal", "≤ "+label)
		}
	}
	drawTimeAxis(c, plot, start, end)
	c.text(b.x, b.y+b.h-4, 11, "#3D434D", "start", "normal", "deliveries per second in each duration bucket (darker: more)")
}

func lookup(s series, t time.Time) float64 {
	for j, tt := range s.Times {
		if tt.Equal(t) {
			return s.Values[j]
		}
	}
	return 0
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

// formatValue formats v in a panel's unit, roughly as Grafana does.
func formatValue(v float64, unit string) string {
	switch {
	case unit == "s":
		return formatSeconds(v)
	case strings.HasPrefix(unit, "suffix:"):
		return formatShort(v) + strings.TrimPrefix(unit, "suffix:")
	}
	return formatShort(v)
}

func formatShort(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + " Mil"
	case a >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + " K"
	case a == math.Trunc(a):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func formatSeconds(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0 s"
	case a < 1:
		return strconv.FormatFloat(v*1000, 'f', -1, 64)[:min(len(strconv.FormatFloat(v*1000, 'f', -1, 64)), 5)] + " ms"
	case a < 120:
		return strconv.FormatFloat(v, 'f', 1, 64) + " s"
	case a < 7200:
		return strconv.FormatFloat(v/60, 'f', 1, 64) + " min"
	case a < 172800:
		return strconv.FormatFloat(v/3600, 'f', 1, 64) + " h"
	}
	return strconv.FormatFloat(v/86400, 'f', 1, 64) + " day"
}
