import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/1.1 exchange over a plain loopback socket, run on a Dispatch thread so that blocking reads and
/// writes never hold one of the (two, on CI) cooperative threads the server needs.
struct HTTPReply: Sendable {
    var status: Int
    /// Header names lowercased.
    var headers: [String: String]
    var body: Data

    /// The body parsed as a JSON object (empty when it is not one).
    var object: [String: Any] { ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any]) ?? [:] }
    /// `error.code` of an error answer.
    var errorCode: String? { (object["error"] as? [String: Any])?["code"] as? String }
    var text: String { String(decoding: body, as: UTF8.self) }
}

struct HTTPClientError: Error, CustomStringConvertible {
    var description: String
}

enum HTTPTestClient {
    /// Sends one request to 127.0.0.1:`port` and reads the answer (framed by its Content-Length).
    /// - Parameters:
    ///   - body: sent with a Content-Length, or in chunks with `chunked`.
    ///   - extraHeaders: sent as they are (a Content-Length here with no body announces a body never sent).
    static func send(port: Int, _ method: String, _ target: String, body: Data? = nil, chunked: Bool = false,
                     extraHeaders: [(String, String)] = []) async throws -> HTTPReply {
        try await onDispatchThread {
            let socket = try Socket(port: port)
            defer { socket.close() }
            var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
            for (k, v) in extraHeaders { head += "\(k): \(v)\r\n" }
            if let body {
                head += chunked ? "Transfer-Encoding: chunked\r\n" : "Content-Length: \(body.count)\r\n"
            }
            head += "\r\n"
            try socket.write(Data(head.utf8))
            if let body {
                if chunked {
                    var offset = 0
                    while offset < body.count {
                        let n = min(65_536, body.count - offset)
                        try socket.write(Data(String(n, radix: 16).utf8) + Data("\r\n".utf8) + body[offset..<offset + n] + Data("\r\n".utf8))
                        offset += n
                    }
                    try socket.write(Data("0\r\n\r\n".utf8))
                } else {
                    try socket.write(body)
                }
            }
            return try socket.readReply()
        }
    }

    /// Whether something accepts connections on the port.
    static func isListening(port: Int) async -> Bool {
        (try? await onDispatchThread { try Socket(port: port).close() }) != nil
    }

    /// Runs blocking work on a Dispatch thread, off Swift's cooperative pool.
    static func onDispatchThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
        }
    }
}

/// A blocking TCP connection to loopback, with 10-minute timeouts so that a test fails instead of hanging (long,
/// because the whole suite on 2 cores can keep the server waiting for a while).
final class Socket: @unchecked Sendable {
    // Used by one thread at a time.
    private let fd: Int32
    private var buffered = Data()

    init(port: Int) throws {
        fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HTTPClientError(description: "socket: errno \(errno)") }
        var timeout = timeval(tv_sec: 600, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port)).bigEndian
        address.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            let e = errno
            Glibc.close(fd)
            throw HTTPClientError(description: "connect to port \(port): errno \(e)")
        }
    }

    func close() { Glibc.close(fd) }

    func write(_ data: Data) throws {
        try data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var sent = 0
            while sent < raw.count {
                let n = Glibc.send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
                guard n > 0 else { throw HTTPClientError(description: "send: errno \(errno)") }
                sent += n
            }
        }
    }

    /// Reads more bytes into the buffer; false at the end of the stream.
    private func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let n = recv(fd, &chunk, chunk.count, 0)
        guard n >= 0 else { throw HTTPClientError(description: "recv: errno \(errno)") }
        buffered.append(contentsOf: chunk[0..<n])
        return n > 0
    }

    /// Reads one response: status line, headers, and a body of Content-Length bytes (or up to the end; none
    /// for 1xx, 204 and 304).
    func readReply() throws -> HTTPReply {
        let separator = Data("\r\n\r\n".utf8)
        while buffered.range(of: separator) == nil {
            guard try fill() else { throw HTTPClientError(description: "connection closed before a response head") }
        }
        let end = buffered.range(of: separator)!
        let lines = String(decoding: buffered[buffered.startIndex..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else {
            throw HTTPClientError(description: "bad status line: \(lines[0])")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Data(buffered[end.upperBound...])
        if (100..<200).contains(status) || status == 204 || status == 304 {
            body = Data()   // no body, whatever the headers say
        } else if let length = headers["content-length"].flatMap({ Int($0) }) {
            while body.count < length {
                guard try fill() else { break }
                body = Data(buffered[end.upperBound...])
            }
            body = body.prefix(length)
        } else {
            while try fill() {}
            body = Data(buffered[end.upperBound...])
        }
        // What follows belongs to the next response on this connection.
        buffered = Data(buffered[(end.upperBound + body.count)...])
        return HTTPReply(status: status, headers: headers, body: body)
    }
}
