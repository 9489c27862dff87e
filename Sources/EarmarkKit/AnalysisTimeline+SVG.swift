import Foundation

extension AnalysisTimeline {
    /// The timeline as a standalone SVG document: a heading, one lane per dimension present (loudness, beats,
    /// sections, key, instruments, sound classes and speech) over one time axis in m:ss, a legend, and the
    /// ``highlight`` drawn across the lanes.
    ///
    /// Every lane is a `<g class="lane" data-lane="NAME">` (names: loudness, beats, sections, key, instruments,
    /// sounds, speech); the highlight is `<rect id="highlight">`; the root element carries `data-plot-x`,
    /// `data-plot-width` and `data-duration`, so a reader can map x to time, and `data-heading-height`, the height of
    /// the heading (a page with its own heading can crop it with the `viewBox`). All text is escaped.
    /// - Parameters:
    ///   - width: width in pixels (at least 480); the height follows from the lanes.
    ///   - emptyMessage: shown instead of lanes when there is none.
    public func svg(width: Double = 1000, emptyMessage: String = "No analysis for this audio.") -> String {
        var drawing = TimelineDrawing(timeline: self, width: max(480, width))
        return drawing.render(emptyMessage: emptyMessage)
    }
}

/// Lays out and writes one timeline; coordinates in pixels, time mapped onto [plotX, plotX + plotWidth].
private struct TimelineDrawing {
    let t: AnalysisTimeline
    let width: Double
    let plotX = 150.0
    let plotWidth: Double
    let duration: Double
    var out = SVGWriter()
    /// Where the next lane starts.
    var y = 0.0
    var legend: [(kind: LegendMark, label: String)] = []

    enum LegendMark { case line(String, Double, dashed: Bool), tick(String, Double), box(String, opacity: Double) }

    init(timeline: AnalysisTimeline, width: Double) {
        t = timeline
        self.width = width
        plotWidth = width - plotX - 24
        duration = timeline.duration.isFinite && timeline.duration > 0 ? timeline.duration : 1
    }

    /// Height of the title (and subtitle) above the lanes; a page that shows its own heading can crop it.
    var headingHeight: Double { t.subtitle == nil ? 42 : 60 }

    func x(_ time: Double) -> Double { plotX + min(max(time, 0), duration) / duration * plotWidth }

    mutating func render(emptyMessage: String) -> String {
        // The lanes are written first, apart: the axis under them and the height need their extent.
        y = headingHeight + 8
        let highlight = t.highlight.flatMap { h -> TimeRange? in
            let (lo, hi) = (min(h.start, h.end), max(h.start, h.end))
            guard lo.isFinite, hi.isFinite, lo <= duration, hi >= 0 else { return nil }
            return TimeRange(start: max(0, lo), end: min(duration, hi))
        }
        // A row for labels over the lanes: the highlight's, and above it room for a page's own marks (a playhead).
        y += highlight != nil ? 32 : 14
        let lanesTop = y
        var lanes = SVGWriter()
        swap(&out, &lanes)
        if let l = t.loudness { loudnessLane(l) }
        if let b = t.beats { beatsLane(b) }
        if let s = t.structure { sectionsLane(s) }
        if let k = t.keys { keyLane(k) }
        if let i = t.instruments { instrumentsLane(i) }
        if let s = t.sounds { soundLanes(s) }
        if !t.hasLanes {
            out.text(emptyMessage, x: plotX + plotWidth / 2, y: y + 34, size: 14, fill: Palette.muted, anchor: "middle", cssClass: "empty")
            y += 56
        }
        swap(&out, &lanes)
        let lanesBottom = y

        var doc = SVGWriter()
        swap(&out, &doc)
        axis(top: lanesTop, bottom: lanesBottom)
        out.raw(lanes.text)
        if let h = highlight { drawHighlight(h, top: lanesTop, bottom: lanesBottom) }
        y = lanesBottom + 40
        if highlight != nil { legend.append((.box(Palette.highlight, opacity: 0.25), "matched stretch")) }
        drawLegend()
        swap(&out, &doc)

        var svg = SVGWriter()
        let height = (y + 14).rounded()
        svg.raw("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(fmt(width))\" height=\"\(fmt(height))\" "
                + "viewBox=\"0 0 \(fmt(width)) \(fmt(height))\" role=\"img\" aria-labelledby=\"timeline-title\" "
                + "font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif\" "
                + "data-plot-x=\"\(fmt(plotX))\" data-plot-width=\"\(fmt(plotWidth))\" data-duration=\"\(fmt(duration, 3))\" "
                + "data-heading-height=\"\(fmt(headingHeight))\">\n")
        svg.raw("<title id=\"timeline-title\">\(xmlEscaped(t.title)) — analysis timeline</title>\n")
        svg.rect(x: 0, y: 0, width: width, height: height, fill: "#ffffff")
        svg.text(t.title, x: 16, y: 30, size: 18, fill: Palette.ink, weight: "700", cssClass: "title", maxWidth: width - 160)
        let length = "\(clock(t.duration)) long"
        svg.text(length, x: width - 16, y: 30, size: 13, fill: Palette.muted, anchor: "end")
        if let s = t.subtitle { svg.text(s, x: 16, y: 52, size: 13, fill: Palette.muted, cssClass: "subtitle", maxWidth: width - 32) }
        svg.raw(doc.text)
        svg.raw("</svg>\n")
        return svg.text
    }

    // MARK: Axis and highlight

    /// Seconds between ticks: the smallest step at least 64 px apart.
    var tickStep: Double {
        let steps: [Double] = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200]
        return steps.first { $0 / duration * plotWidth >= 64 } ?? (duration / 10 / 86400).rounded(.up) * 86400
    }

    /// Grid lines through the lanes and the time axis under them, labelled m:ss (m:ss.s below one second a tick).
    mutating func axis(top: Double, bottom: Double) {
        let step = tickStep
        out.raw("<g class=\"axis\">\n")
        var i = 0
        while Double(i) * step <= duration + 1e-9 {
            let time = Double(i) * step
            let px = x(time)
            out.line(px, top, px, bottom, stroke: Palette.grid, width: 1)
            out.line(px, bottom, px, bottom + 5, stroke: Palette.muted, width: 1)
            out.text(step < 1 ? clock(time, tenths: true) : clock(time), x: px, y: bottom + 18, size: 11, fill: Palette.muted,
                     anchor: i == 0 ? "start" : "middle", cssClass: "tick")
            i += 1
        }
        out.line(plotX, bottom, plotX + plotWidth, bottom, stroke: Palette.muted, width: 1)
        out.raw("</g>\n")
    }

    mutating func drawHighlight(_ h: TimeRange, top: Double, bottom: Double) {
        let x0 = x(h.start), x1 = max(x(h.end), x0 + 2)
        out.raw("<g class=\"highlight\">\n")
        out.raw("<rect id=\"highlight\" x=\"\(fmt(x0, 2))\" y=\"\(fmt(top - 4))\" width=\"\(fmt(x1 - x0, 2))\" "
                + "height=\"\(fmt(bottom - top + 4))\" fill=\"\(Palette.highlight)\" fill-opacity=\"0.18\" "
                + "stroke=\"\(Palette.highlightEdge)\" stroke-width=\"1.5\" data-start=\"\(fmt(h.start, 3))\" data-end=\"\(fmt(h.end, 3))\"/>\n")
        let label = "matched \(clock(h.start))–\(clock(h.end))"
        let anchorEnd = x0 > plotX + plotWidth - 140
        out.text(label, x: anchorEnd ? x1 : x0, y: top - 8, size: 12, fill: Palette.highlightEdge, weight: "600",
                 anchor: anchorEnd ? "end" : "start")
        out.raw("</g>\n")
    }

    mutating func drawLegend() {
        guard !legend.isEmpty else { return }
        var cx = plotX
        out.raw("<g class=\"legend\">\n")
        for (mark, label) in legend {
            let itemWidth = 30 + Double(label.count) * 6.4 + 18
            if cx + itemWidth > width - 16 {
                cx = plotX
                y += 18
            }
            switch mark {
            case .line(let color, let w, let dashed):
                out.raw("<line x1=\"\(fmt(cx))\" y1=\"\(fmt(y - 4))\" x2=\"\(fmt(cx + 22))\" y2=\"\(fmt(y - 4))\" stroke=\"\(color)\" "
                        + "stroke-width=\"\(fmt(w))\"\(dashed ? " stroke-dasharray=\"5 3\"" : "")/>\n")
            case .tick(let color, let h):
                out.line(cx + 11, y - 4 - h / 2, cx + 11, y - 4 + h / 2, stroke: color, width: 1.5)
            case .box(let color, let opacity):
                out.rect(x: cx, y: y - 10, width: 22, height: 12, fill: color, opacity: opacity, rx: 2)
            }
            out.text(label, x: cx + 28, y: y, size: 11, fill: Palette.ink)
            cx += itemWidth
        }
        out.raw("</g>\n")
    }

    // MARK: Lanes

    /// Opens a lane: its group, its title (and a second line) in the left column; returns its top.
    mutating func beginLane(_ name: String, title: String, detail: [String], height: Double) -> Double {
        let top = y
        out.raw("<g class=\"lane\" data-lane=\"\(name)\">\n")
        out.text(title, x: 16, y: top + 13, size: 12, fill: Palette.ink, weight: "700", cssClass: "lane-title")
        for (i, line) in detail.enumerated() {
            out.text(line, x: 16, y: top + 27 + Double(i) * 13, size: 11, fill: Palette.muted, maxWidth: plotX - 24)
        }
        y += height
        return top
    }

    mutating func endLane() {
        out.raw("</g>\n")
        out.line(16, y + 5, plotX + plotWidth, y + 5, stroke: Palette.line, width: 1)
        y += 10
    }

    mutating func loudnessLane(_ l: AnalysisTimeline.Loudness) {
        // The scale follows the short-term curve (momentary dips in pauses would squash it; they are clamped).
        let values = (l.shortTerm.isEmpty ? l.momentary : l.shortTerm).compactMap(\.value).filter(\.isFinite)
        let height = 96.0
        let detail = l.integrated.map { ["\(fmt($0)) LUFS", "integrated"] } ?? ["silent"]
        let top = beginLane("loudness", title: "Loudness", detail: detail, height: height)
        if let lowest = values.min(), let highest = values.max() {
            var lo = max(-70, ((lowest - 3) / 10).rounded(.down) * 10)
            var hi = min(0, (highest / 5).rounded(.up) * 5)
            if hi - lo < 20 { lo = hi - 20 }
            if hi <= lo { hi = lo + 20 }
            let y0 = top + 6, y1 = top + height - 6
            func py(_ v: Double) -> Double { y1 - (min(max(v, lo), hi) - lo) / (hi - lo) * (y1 - y0) }
            let gridStep = (y1 - y0) / (hi - lo) * 10 >= 16 ? 10.0 : 20.0
            var level = (hi / gridStep).rounded(.down) * gridStep
            while level >= lo {
                out.line(plotX, py(level), plotX + plotWidth, py(level), stroke: Palette.grid, width: 1)
                out.text("\(Int(level))", x: plotX - 6, y: py(level) + 4,
                         size: 10, fill: Palette.muted, anchor: "end")
                level -= gridStep
            }
            if !l.momentary.isEmpty {
                out.path(curve(l.momentary, py), stroke: Palette.momentary, width: 1, cssClass: "momentary")
                legend.append((.line(Palette.momentary, 1.5, dashed: false), "momentary loudness (400 ms)"))
            }
            out.path(curve(l.shortTerm, py), stroke: Palette.accent, width: 2, cssClass: "short-term")
            legend.append((.line(Palette.accent, 2, dashed: false), "short-term loudness (3 s)"))
            if let i = l.integrated, i.isFinite {
                out.raw("<line x1=\"\(fmt(plotX))\" y1=\"\(fmt(py(i), 2))\" x2=\"\(fmt(plotX + plotWidth))\" y2=\"\(fmt(py(i), 2))\" "
                        + "stroke=\"\(Palette.ink)\" stroke-opacity=\"0.55\" stroke-width=\"1\" stroke-dasharray=\"5 3\" class=\"integrated\"/>\n")
                legend.append((.line(Palette.ink, 1, dashed: true), "integrated"))
            }
        } else {
            out.text("silence: no loudness", x: plotX + 6, y: top + height / 2, size: 12, fill: Palette.muted)
        }
        endLane()
    }

    /// A polyline through `points`, broken where a value is missing; thinned to about one point per pixel.
    func curve(_ points: [AnalysisTimeline.Point], _ py: (Double) -> Double) -> String {
        var d = ""
        var penDown = false
        var column = -1, sum = 0.0, count = 0
        func flush() {
            guard column >= 0 else { return }
            if count > 0 {
                let px = plotX + (Double(column) + 0.5)
                d += (penDown ? "L" : "M") + fmt(min(px, plotX + plotWidth), 1) + " " + fmt(py(sum / Double(count)), 1)
                penDown = true
            } else {
                penDown = false
            }
        }
        for p in points where p.time >= 0 && p.time <= duration + 1e-6 {
            let c = Int((x(p.time) - plotX).rounded(.down))
            if c != column {
                flush()
                column = c
                sum = 0
                count = 0
            }
            if let v = p.value, v.isFinite {
                sum += v
                count += 1
            }
        }
        flush()
        return d
    }

    mutating func beatsLane(_ b: AnalysisTimeline.Beats) {
        let detail = b.bpm.map { ["\(fmt($0)) BPM · \(b.beatsPerBar) a bar"] } ?? ["no steady pulse"]
        let height = 34.0
        let top = beginLane("beats", title: "Beats & bars", detail: detail, height: height)
        let perSecond = plotWidth / duration
        let beatSpacing = b.beats.count > 1 ? (b.beats.last! - b.beats.first!) / Double(b.beats.count - 1) * perSecond : .infinity
        if beatSpacing >= 3 {
            var d = ""
            for beat in b.beats where beat <= duration { d += "M\(fmt(x(beat), 1)) \(fmt(top + 18))V\(fmt(top + 30))" }
            out.path(d, stroke: Palette.beat, width: 1, cssClass: "beat")
            legend.append((.tick(Palette.beat, 12), "beat"))
        }
        // Bar numbers, every 1, 2, 4, … bars so that they do not collide; when bars are dense, only the numbered
        // ones are drawn strong.
        let barSpacing = b.bars.count > 1 ? (b.bars.last! - b.bars.first!) / Double(b.bars.count - 1) * perSecond : .infinity
        var every = 1
        while Double(every) * barSpacing < 36, every < 1024 { every *= 2 }
        let dense = barSpacing < 8
        var strong = "", faint = ""
        for (i, bar) in b.bars.enumerated() where bar <= duration {
            let tick = "M\(fmt(x(bar), 1)) \(fmt(top + 6))V\(fmt(top + 30))"
            if !dense || i % every == 0 { strong += tick } else { faint += tick }
        }
        out.path(faint, stroke: Palette.beat, width: 1, cssClass: "bar")
        out.path(strong, stroke: Palette.ink, width: 1.5, cssClass: "bar")
        if !b.bars.isEmpty { legend.append((.tick(Palette.ink, 16), "bar (numbered)")) }
        for (i, bar) in b.bars.enumerated() where i % every == 0 && bar <= duration && x(bar) + 20 < plotX + plotWidth + 10 {
            out.raw("<text x=\"\(fmt(x(bar) + 3, 1))\" y=\"\(fmt(top + 13))\" font-size=\"10\" fill=\"\(Palette.muted)\" stroke=\"#ffffff\" "
                    + "stroke-width=\"3\" paint-order=\"stroke\">\(i + 1)</text>\n")
        }
        if b.beats.isEmpty { out.text("no beats found", x: plotX + 6, y: top + 22, size: 12, fill: Palette.muted) }
        endLane()
    }

    mutating func sectionsLane(_ s: AnalysisTimeline.Structure) {
        let top = beginLane("sections", title: "Sections", detail: ["\(s.sections.count) sections", "\(s.segments.count) segments"], height: 42)
        var colors: [String: String] = [:]
        for section in s.sections where colors[section.label] == nil {
            colors[section.label] = Palette.categorical[colors.count % Palette.categorical.count]
        }
        for section in s.sections {
            spanBox(section, top: top + 2, height: 24, fill: colors[section.label] ?? Palette.other, cssClass: "section", textSize: 12)
        }
        for (i, segment) in s.segments.enumerated() {
            let x0 = x(segment.start), x1 = x(segment.end)
            out.rect(x: x0, y: top + 30, width: max(1, x1 - x0 - 1), height: 9, fill: i % 2 == 0 ? "#c5ccd9" : "#e2e6ee", cssClass: "segment")
        }
        endLane()
    }

    mutating func keyLane(_ keys: [AnalysisTimeline.Span]) {
        let distinct = Set(keys.map(\.label)).count
        let detail = keys.isEmpty ? "no key" : distinct == 1 ? keys[0].label : "\(keys.count) ranges · \(distinct) keys"
        let detailLines = [detail]
        let top = beginLane("key", title: "Key", detail: detailLines, height: 32)
        for k in keys { spanBox(k, top: top + 2, height: 24, fill: Palette.key(k.label), cssClass: "key", textSize: 11) }
        if keys.isEmpty { out.text("no key found", x: plotX + 6, y: top + 18, size: 12, fill: Palette.muted) }
        endLane()
    }

    /// A box over a span with its label inside when it fits (the full label also as a tooltip).
    mutating func spanBox(_ s: AnalysisTimeline.Span, top: Double, height: Double, fill: String, cssClass: String, textSize: Double) {
        let x0 = x(s.start), x1 = x(s.end)
        guard x1 > x0 else { return }
        out.raw("<rect x=\"\(fmt(x0, 1))\" y=\"\(fmt(top))\" width=\"\(fmt(max(1, x1 - x0 - 1), 1))\" height=\"\(fmt(height))\" "
                + "fill=\"\(fill)\" rx=\"3\" class=\"\(cssClass)\"><title>\(xmlEscaped(s.label)) \(clock(s.start))–\(clock(s.end))</title></rect>\n")
        if let label = fitted(s.label, width: x1 - x0 - 8, size: textSize) {
            out.text(label, x: x0 + 5, y: top + height / 2 + textSize * 0.36, size: textSize, fill: Palette.ink)
        }
    }

    mutating func instrumentsLane(_ families: [AnalysisTimeline.Family]) {
        let row = 17.0
        let playing = families.filter { !$0.active.isEmpty }.count
        let top = beginLane("instruments", title: "Instruments", detail: ["\(playing) of \(families.count) playing"],
                            height: max(34, row * Double(families.count)) + 2)
        for (i, f) in families.enumerated() {
            let rowTop = top + Double(i) * row, bottom = rowTop + row - 2
            let color = Palette.family(f.name)
            out.raw("<g class=\"family\" data-family=\"\(xmlEscaped(f.name))\">\n")
            out.text(f.name, x: plotX - 6, y: rowTop + 11, size: 11, fill: f.active.isEmpty ? Palette.muted : Palette.ink, anchor: "end")
            out.rect(x: plotX, y: rowTop + 1, width: plotWidth, height: row - 3, fill: "#f6f7f9")
            // The activity curve as an area, the ranges where the family plays as a bar along the row's foot.
            var d = ""
            var started = false
            for v in f.activity where v.start < duration {
                let h = min(1, max(0, v.value)) * (row - 5)
                d += (started ? "L" : "M\(fmt(x(v.start), 1)) \(fmt(bottom))L") + "\(fmt(x(v.start), 1)) \(fmt(bottom - h, 1))"
                d += "L\(fmt(x(v.end), 1)) \(fmt(bottom - h, 1))"
                started = true
            }
            if started, let last = f.activity.last(where: { $0.start < duration }) { d += "L\(fmt(x(last.end), 1)) \(fmt(bottom))Z" }
            if !d.isEmpty { out.raw("<path d=\"\(d)\" fill=\"\(color)\" fill-opacity=\"0.45\" class=\"activity\"/>\n") }
            for r in f.active {
                out.rect(x: x(r.start), y: bottom - 3, width: max(1, x(r.end) - x(r.start)), height: 3, fill: color, cssClass: "active")
            }
            out.raw("</g>\n")
        }
        legend.append((.box(Palette.family("keys"), opacity: 0.45), "instrument activity"))
        legend.append((.box(Palette.family("keys"), opacity: 1), "playing"))
        endLane()
    }

    mutating func soundLanes(_ s: AnalysisTimeline.Sounds) {
        // The labels that lead longest get colours; the rest share grey.
        var total: [String: Double] = [:]
        for c in s.classes { total[c.label, default: 0] += c.end - c.start }
        let ranked = total.sorted { $0.value > $1.value || ($0.value == $1.value && $0.key < $1.key) }.map(\.key)
        var colors: [String: String] = [:]
        for (i, label) in ranked.prefix(Palette.sound.count).enumerated() { colors[label] = Palette.sound[i] }
        let top = beginLane("sounds", title: "Sound classes", detail: ranked.first.map { ["mostly \($0)"] } ?? [], height: 46)
        for c in s.classes {
            spanBox(c, top: top + 2, height: 20, fill: colors[c.label] ?? Palette.other, cssClass: "sound", textSize: 10)
        }
        // Their key, under the row.
        var cx = plotX
        for label in ranked.prefix(Palette.sound.count) {
            let w = 18 + Double(label.count) * 6 + 12
            if cx + w > plotX + plotWidth { break }
            out.rect(x: cx, y: top + 28, width: 10, height: 10, fill: colors[label]!, rx: 2)
            out.text(label, x: cx + 14, y: top + 37, size: 10, fill: Palette.ink)
            cx += w
        }
        endLane()

        let share = t.duration > 0 ? s.speech.reduce(0) { $0 + $1.duration } / t.duration : 0
        let words = s.transcript.reduce(0) { $0 + $1.label.split(whereSeparator: \.isWhitespace).count }
        let top2 = beginLane("speech", title: "Speech",
                             detail: [s.speech.isEmpty ? "none" : "\(Int((share * 100).rounded())) % of the time"]
                                 + (words > 0 ? ["\(words) words transcribed"] : []),
                             height: s.transcript.isEmpty ? 30 : 44)
        for r in s.speech {
            out.raw("<rect x=\"\(fmt(x(r.start), 1))\" y=\"\(fmt(top2 + 4))\" width=\"\(fmt(max(1, x(r.end) - x(r.start)), 1))\" height=\"14\" "
                    + "fill=\"\(Palette.speech)\" rx=\"3\" class=\"speech\"><title>speech \(clock(r.start))–\(clock(r.end))</title></rect>\n")
        }
        // Each segment's text under its stretch, cut to the stretch's width; the whole of it is the tooltip.
        for segment in s.transcript {
            let left = x(segment.start)
            let shown = fitted(segment.label, width: max(0, x(segment.end) - left), size: 10) ?? ""
            out.raw("<text x=\"\(fmt(left, 1))\" y=\"\(fmt(top2 + 31))\" font-size=\"10\" fill=\"\(Palette.ink)\" class=\"transcript\">"
                    + "\(xmlEscaped(shown))<title>\(xmlEscaped(segment.label)) \(clock(segment.start))–\(clock(segment.end))</title></text>\n")
        }
        if s.speech.isEmpty { out.text("no speech detected", x: plotX + 6, y: top2 + 15, size: 12, fill: Palette.muted) }
        endLane()
    }

    /// `label`, cut with an ellipsis to fit `width` pixels of text at `size`; nil when not even 3 characters fit.
    func fitted(_ label: String, width: Double, size: Double) -> String? {
        let fits = Int(width / (size * 0.6))
        if label.count <= fits { return label }
        return fits >= 3 ? String(label.prefix(fits - 1)) + "…" : nil
    }
}

/// The colours of the timeline.
private enum Palette {
    static let ink = "#1d2330", muted = "#6b7385", line = "#e3e6ec", grid = "#eef0f4"
    static let accent = "#3451d1", momentary = "#a9b8ef"
    static let beat = "#9aa3b5"
    static let highlight = "#f59e0b", highlightEdge = "#b45309"
    static let speech = "#e0703c", other = "#d3d7df"
    /// Sections A, B, C, … in order of appearance.
    static let categorical = ["#8fb3e0", "#f4b26b", "#97c98b", "#e89090", "#b79ce0", "#ead27a", "#7ccac7", "#e0a1c8"]
    /// Sound classes, longest first.
    static let sound = ["#7fa7dc", "#9fd08f", "#f0b46c", "#c6a3e3", "#ed9a9a", "#78c7c4"]

    static func family(_ name: String) -> String {
        switch name {
        case "drums": "#c0504d"
        case "bass": "#7e5fb0"
        case "guitar": "#e8893a"
        case "keys": "#3c9fc0"
        case "strings": "#6aa84f"
        case "brass": "#c9a227"
        case "woodwinds": "#2c9c8f"
        case "voice": "#d6619a"
        case "synth": "#5b7bd5"
        default: "#7a8394"
        }
    }

    /// A key's colour: its tonic's place on the circle of fifths is the hue (neighbouring keys look alike),
    /// minor keys darker than major ones.
    static func key(_ label: String) -> String {
        let parts = label.split(separator: " ")
        guard let tonic = parts.first, let pc = MusicalKey.pitchClass(of: String(tonic)) else { return other }
        let fifths = (pc * 7) % 12
        let minor = parts.count > 1 && parts[1] == "minor"
        return hsl(hue: Double(fifths) * 30, saturation: 0.55, lightness: minor ? 0.62 : 0.76)
    }

    static func hsl(hue: Double, saturation s: Double, lightness l: Double) -> String {
        let c = (1 - abs(2 * l - 1)) * s
        let h = hue / 60
        let xx = c * (1 - abs(h.truncatingRemainder(dividingBy: 2) - 1))
        let (r, g, b): (Double, Double, Double) = switch Int(h) % 6 {
        case 0: (c, xx, 0)
        case 1: (xx, c, 0)
        case 2: (0, c, xx)
        case 3: (0, xx, c)
        case 4: (xx, 0, c)
        default: (c, 0, xx)
        }
        let m = l - c / 2
        func hex(_ v: Double) -> String {
            let n = Int(((v + m) * 255).rounded())
            return String(min(255, max(0, n)), radix: 16).leftPadded(2)
        }
        return "#" + hex(r) + hex(g) + hex(b)
    }
}

/// Appends SVG elements to a string; every text and attribute value from outside goes through ``xmlEscaped(_:)``.
struct SVGWriter {
    var text = ""

    mutating func raw(_ s: String) { text += s }

    mutating func line(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double, stroke: String, width: Double) {
        text += "<line x1=\"\(fmt(x1, 1))\" y1=\"\(fmt(y1, 1))\" x2=\"\(fmt(x2, 1))\" y2=\"\(fmt(y2, 1))\" stroke=\"\(stroke)\" stroke-width=\"\(fmt(width))\"/>\n"
    }

    mutating func rect(x: Double, y: Double, width: Double, height: Double, fill: String, opacity: Double = 1, rx: Double = 0,
                       cssClass: String? = nil) {
        text += "<rect x=\"\(fmt(x, 1))\" y=\"\(fmt(y, 1))\" width=\"\(fmt(width, 1))\" height=\"\(fmt(height, 1))\" fill=\"\(fill)\""
        if opacity < 1 { text += " fill-opacity=\"\(fmt(opacity, 2))\"" }
        if rx > 0 { text += " rx=\"\(fmt(rx))\"" }
        if let cssClass { text += " class=\"\(cssClass)\"" }
        text += "/>\n"
    }

    mutating func path(_ d: String, stroke: String, width: Double, cssClass: String) {
        guard !d.isEmpty else { return }
        text += "<path d=\"\(d)\" fill=\"none\" stroke=\"\(stroke)\" stroke-width=\"\(fmt(width))\" stroke-linejoin=\"round\" class=\"\(cssClass)\"/>\n"
    }

    /// A line of text; with `maxWidth`, cut with an ellipsis to about that many pixels.
    mutating func text(_ s: String, x: Double, y: Double, size: Double, fill: String, weight: String? = nil, anchor: String? = nil,
                       cssClass: String? = nil, maxWidth: Double? = nil) {
        var s = s
        if let maxWidth {
            let fits = max(4, Int(maxWidth / (size * 0.56)))
            if s.count > fits { s = String(s.prefix(fits - 1)) + "…" }
        }
        text += "<text x=\"\(fmt(x, 1))\" y=\"\(fmt(y, 1))\" font-size=\"\(fmt(size))\" fill=\"\(fill)\""
        if let weight { text += " font-weight=\"\(weight)\"" }
        if let anchor { text += " text-anchor=\"\(anchor)\"" }
        if let cssClass { text += " class=\"\(cssClass)\"" }
        text += ">\(xmlEscaped(s))</text>\n"
    }
}

/// `s` safe inside XML text and quoted attributes: `&`, `<`, `>`, `"` and `'` escaped, characters XML 1.0 does
/// not allow (C0 controls other than tab and newlines, U+FFFE, U+FFFF) dropped.
func xmlEscaped(_ s: String) -> String {
    var out = ""
    out.reserveCapacity(s.utf8.count)
    for scalar in s.unicodeScalars {
        switch scalar {
        case "&": out += "&amp;"
        case "<": out += "&lt;"
        case ">": out += "&gt;"
        case "\"": out += "&quot;"
        case "'": out += "&apos;"
        case "\t", "\n", "\r": out.unicodeScalars.append(scalar)
        default:
            if scalar.value < 0x20 || scalar.value == 0xFFFE || scalar.value == 0xFFFF { continue }
            out.unicodeScalars.append(scalar)
        }
    }
    return out
}

/// A number for SVG: at most `decimals` decimals, no trailing zeros, never exponent notation.
private func fmt(_ v: Double, _ decimals: Int = 1) -> String {
    guard v.isFinite else { return "0" }
    var s = String(format: "%.\(decimals)f", v)
    if s.contains(".") {
        while s.hasSuffix("0") { s.removeLast() }
        if s.hasSuffix(".") { s.removeLast() }
    }
    return s == "-0" ? "0" : s
}

/// `m:ss` (`h:mm:ss` from an hour; `m:ss.s` with `tenths`).
private func clock(_ seconds: Double, tenths: Bool = false) -> String {
    guard seconds.isFinite else { return "?:??" }
    if tenths {
        let t = Int((max(0, seconds) * 10).rounded())
        return "\(t / 600):" + String(t / 10 % 60).leftPadded(2, with: "0") + ".\(t % 10)"
    }
    let s = Int(max(0, seconds).rounded())
    let (h, m, r) = (s / 3600, s / 60 % 60, s % 60)
    return (h > 0 ? "\(h):" + String(m).leftPadded(2, with: "0") : "\(m)") + ":" + String(r).leftPadded(2, with: "0")
}

private extension String {
    func leftPadded(_ width: Int, with pad: Character = "0") -> String {
        count >= width ? self : String(repeating: pad, count: width - count) + self
    }
}
