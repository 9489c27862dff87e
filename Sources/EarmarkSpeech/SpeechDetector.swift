import EarmarkAudio
import EarmarkClassification
import Foundation

/// Where a recording holds speech: the sound classifier's speech activity (``SpeechActivity``, the same
/// ranges `earmark classify` and `analyze` report), widened a little so that no word is cut at an edge.
///
/// It reads the same 16-kHz samples as the recogniser (YAMNet also runs at 16 kHz, so nothing is
/// resampled twice). Not thread-safe; give each thread its own.
public struct SpeechDetector {
    /// The sound classification model (YAMNet).
    public let soundModel: SoundModel
    /// Onset, offset, bridging and minimum duration of speech ranges.
    public var activity: SpeechActivity
    /// Seconds added before and after each range (the classifier's windows are 0.96 s, 0.48 s apart). Default 0.5.
    public var padding = 0.5

    public init(soundModel: SoundModel) {
        self.soundModel = soundModel
        activity = SpeechActivity(model: soundModel)
    }

    /// Speech ranges of mono `samples` at `sampleRate` Hz, padded, merged where they touch, within the recording.
    public func ranges(samples: [Float], sampleRate: Int) throws -> [TimeRange] {
        guard activity.isAvailable else {
            throw SoundModelError(.inconsistent, "the sound model \(soundModel.name) has no speech label")
        }
        let stream = try SoundClassificationStream(model: soundModel, options: ClassificationOptions(topK: 1))
        // Fed 10 s at a time; a window keeps only its scores (an hour holds 7,500 windows).
        var windows: [SoundWindow] = []
        func keep(_ more: [SoundWindow]) {
            for var w in more {
                w.embedding = []
                windows.append(w)
            }
        }
        let chunk = 10 * sampleRate
        var from = 0
        while from < samples.count {
            let to = min(samples.count, from + chunk)
            keep(try stream.append(PCMBuffer(samples: Array(samples[from..<to]), sampleRate: Double(sampleRate))))
            from = to
        }
        keep(stream.finish())
        let duration = Double(samples.count) / Double(sampleRate)
        return SpeechDetector.widen(activity.ranges(windows), by: padding, within: duration)
    }

    /// `ranges` (time-ordered) each widened by `padding` seconds, clamped to 0…`duration`, overlapping ones joined.
    static func widen(_ ranges: [TimeRange], by padding: Double, within duration: Double) -> [TimeRange] {
        var out: [TimeRange] = []
        for r in ranges {
            let wide = TimeRange(start: max(0, r.start - padding), end: min(duration, r.end + padding))
            guard wide.end > wide.start else { continue }
            if var last = out.last, wide.start <= last.end {
                last.end = max(last.end, wide.end)
                out[out.count - 1] = last
            } else {
                out.append(wide)
            }
        }
        return out
    }
}
