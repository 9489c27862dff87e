import Foundation

/// A private PulseAudio daemon for this test process, with a virtual microphone:
/// sound played to the sink `virt_out` is what the default source `virt_mic` records (in real time).
/// Started once, on first use; killed when the process exits. Clients reach it through
/// ``environment`` (PULSE_RUNTIME_PATH).
public struct PulseDaemon: Sendable {
    public let runtimePath: String
    /// Environment for clients of this daemon (earmark, paplay, pactl).
    public var environment: [String: String?] { ["PULSE_RUNTIME_PATH": runtimePath, "PULSE_SERVER": nil] }

    public static let shared = Shared<PulseDaemon> { try start() }

    private static func start() throws -> PulseDaemon {
        let dir = TestPaths.scratchRoot.appendingPathComponent("pulse-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let daemon = PulseDaemon(runtimePath: dir)
        let env = daemon.environment
        // As root PulseAudio warns that it is meant for per-user use; that is harmless here.
        try Run.checked("pulseaudio", [
            "--daemonize=yes", "--exit-idle-time=-1", "-n", "--use-pid-file=yes",
            "--log-target=file:\(dir)/pulse.log",
            "--load=module-native-protocol-unix",
            "--load=module-null-sink sink_name=virt_out rate=44100 channels=1",
            "--load=module-remap-source source_name=virt_mic master=virt_out.monitor",
        ], environment: env, timeout: 30)
        atexit {
            // The daemon outlives this process otherwise; its pid file is in the runtime folder.
            let pidFile = TestPaths.scratchRoot.appendingPathComponent("pulse-\(getpid())/pid").path
            if let text = try? String(contentsOfFile: pidFile, encoding: .utf8), let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                kill(pid, SIGTERM)
            }
        }
        for _ in 0..<100 {
            if (try? Run.process("pactl", ["info"], environment: env, timeout: 5))?.status == 0 { break }
            usleep(100_000)
        }
        try Run.checked("pactl", ["set-default-source", "virt_mic"], environment: env, timeout: 10)
        try Run.checked("pactl", ["set-default-sink", "virt_out"], environment: env, timeout: 10)
        return daemon
    }
}
