import EarmarkKit
import Foundation

/// A one-line progress bar for `catalog add`, redrawn in place on standard error.
/// Only draws when enabled (stderr is a terminal and the output is not JSON).
final class ProgressBar: @unchecked Sendable {
    private let enabled: Bool
    private let lock = NSLock()
    private var lastDraw: ContinuousClock.Instant?
    private var visible = false
    private let started = ContinuousClock.now

    init(enabled: Bool) {
        self.enabled = enabled
    }

    func update(_ p: IngestProgress) {
        update(done: p.done, total: p.total, audioSeconds: p.audioSeconds, elapsed: p.elapsed, current: p.current)
    }

    /// `done` of `total` items, `audioSeconds` of audio so far, working on `current`; the speed is taken over
    /// the time since the bar was made.
    func update(done: Int, total: Int, audioSeconds: Double, current: String) {
        let t = ContinuousClock.now - started
        update(done: done, total: total, audioSeconds: audioSeconds,
               elapsed: Double(t.components.seconds) + Double(t.components.attoseconds) * 1e-18, current: current)
    }

    /// `done` of `total` items, `audioSeconds` of audio in `elapsed` seconds, working on `current`.
    func update(done: Int, total: Int, audioSeconds: Double, elapsed: Double, current: String) {
        guard enabled else { return }
        lock.lock()
        defer { lock.unlock() }
        let now = ContinuousClock.now
        if let last = lastDraw, now - last < .milliseconds(100), done < total { return }
        lastDraw = now
        visible = true
        let text = ProgressBar.line(done: done, total: total, audioSeconds: audioSeconds, elapsed: elapsed, current: current,
                                    width: ProgressBar.terminalWidth())
        writeStderr("\r" + text + "\u{1B}[K")
    }

    /// Prints `text` as a line on standard output, above the bar (which the next update redraws).
    func printLine(_ text: String) {
        lock.lock()
        defer { lock.unlock() }
        if enabled && visible {
            writeStderr("\r\u{1B}[K")
            visible = false
        }
        print(text)
        fflush(nil)
    }

    /// Erases the bar.
    func finish() {
        guard enabled else { return }
        lock.lock()
        defer { lock.unlock() }
        if visible { writeStderr("\r\u{1B}[K") }
        visible = false
    }

    static func line(done: Int, total: Int, audioSeconds: Double, elapsed: Double, current: String, width: Int) -> String {
        let barWidth = 20
        let fraction = total > 0 ? min(1, Double(done) / Double(total)) : 1
        let filled = Int((fraction * Double(barWidth)).rounded(.down))
        let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: barWidth - filled)
        let speed = elapsed > 0 ? String(format: "%.0f× real-time", audioSeconds / elapsed) : ""
        var text = "\(bar) \(done)/\(total)  " + String(format: "%.2f h audio", audioSeconds / 3600) + (speed.isEmpty ? "" : "  " + speed)
        let room = width - 1 - text.count - 2
        if room >= 8 { text += "  " + truncate(PathName.last(current), room) }
        return truncate(text, max(10, width - 1))
    }

    /// Columns of the terminal on stderr ($COLUMNS or 80 when unknown).
    static func terminalWidth() -> Int {
        #if canImport(Glibc) || canImport(Darwin)
        var size = winsize()
        if ioctl(2, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        #endif
        if let c = ProcessInfo.processInfo.environment["COLUMNS"].flatMap(Int.init), c > 0 { return c }
        return 80
    }
}
