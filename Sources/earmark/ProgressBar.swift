import EarmarkKit
import Foundation

/// A one-line progress bar for `catalog add`, redrawn in place on standard error.
/// Only draws when enabled (stderr is a terminal and the output is not JSON).
final class ProgressBar: @unchecked Sendable {
    private let enabled: Bool
    private let lock = NSLock()
    private var lastDraw: ContinuousClock.Instant?
    private var visible = false

    init(enabled: Bool) {
        self.enabled = enabled
    }

    func update(_ p: IngestProgress) {
        guard enabled else { return }
        lock.lock()
        defer { lock.unlock() }
        let now = ContinuousClock.now
        if let last = lastDraw, now - last < .milliseconds(100), p.done < p.total { return }
        lastDraw = now
        visible = true
        writeStderr("\r" + ProgressBar.line(p, width: ProgressBar.terminalWidth()) + "\u{1B}[K")
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

    static func line(_ p: IngestProgress, width: Int) -> String {
        let barWidth = 20
        let fraction = p.total > 0 ? min(1, Double(p.done) / Double(p.total)) : 1
        let filled = Int((fraction * Double(barWidth)).rounded(.down))
        let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: barWidth - filled)
        let speed = p.elapsed > 0 ? String(format: "%.0f× real-time", p.audioSeconds / p.elapsed) : ""
        var text = "\(bar) \(p.done)/\(p.total)  " + String(format: "%.2f h audio", p.audioSeconds / 3600) + (speed.isEmpty ? "" : "  " + speed)
        let room = width - 1 - text.count - 2
        if room >= 8 { text += "  " + truncate((p.current as NSString).lastPathComponent, room) }
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
