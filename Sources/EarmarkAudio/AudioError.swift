/// An error raised while opening, decoding or converting audio.
public struct AudioError: Error, CustomStringConvertible, Sendable, Equatable {
    /// What went wrong, in a form callers can switch on.
    public enum Code: String, Sendable {
        /// The file does not exist or cannot be read.
        case unreadable
        /// Neither libsndfile nor ffmpeg (when installed) recognises the format.
        case unsupportedFormat
        /// The file decodes partly or not at all: damaged or truncated.
        case corrupt
        /// The file holds no audio samples.
        case empty
        /// The audio parameters are unusable (a sample rate of 0, no channels, …).
        case invalidFormat
    }

    public var code: Code
    public var message: String
    public var path: String?

    public init(_ code: Code, _ message: String, path: String? = nil) {
        self.code = code
        self.message = message
        self.path = path
    }

    public var description: String {
        if let path { return "\(path): \(message)" }
        return message
    }
}
