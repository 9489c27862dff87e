import Foundation

/// A thread of its own for tasks that prefer it (`withTaskExecutorPreference`), child tasks included.
///
/// The writer runs `Ingestor.add` here: the ingestor decodes and fingerprints in child tasks, which would
/// otherwise block Swift's cooperative threads (two on a 2-core machine) for seconds, and with them every
/// upload and answer of the server.
final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    // `jobs` and `stopped` are guarded by `condition`.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var stopped = false

    init(name: String) {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Ends the thread once the jobs enqueued so far have run.
    func stop() {
        condition.lock()
        stopped = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while jobs.isEmpty && !stopped { condition.wait() }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
