import Foundation

/// Expected command output as the documents write it, matched against what a command printed: a line of just
/// `...` matches any number of lines (also none); `...` inside a line matches any text; `≈12.3` matches a number
/// within one unit of its last digit (12.2…12.4), `≈12.3±0.5` within the tolerance given; everything else must
/// match exactly. Used by the ```console examples of README.md and docs/ and by the README's curl examples.
public enum OutputPattern {
    public static let ellipsis = "..."

    /// Whether `actual` matches the expected lines (see ``OutputPattern``).
    public static func matches(_ expected: [String], _ actual: [String]) -> Bool {
        var memo: [Int: Bool] = [:]
        func go(_ e: Int, _ a: Int) -> Bool {
            let key = e * (actual.count + 1) + a
            if let known = memo[key] { return known }
            let result: Bool
            if e == expected.count {
                result = a == actual.count
            } else if expected[e] == ellipsis {
                result = (a...actual.count).contains { go(e + 1, $0) }
            } else {
                result = a < actual.count && lineMatches(expected[e], actual[a]) && go(e + 1, a + 1)
            }
            memo[key] = result
            return result
        }
        return go(0, 0)
    }

    private static let approximate = try! NSRegularExpression(pattern: #"≈(-?[0-9]+(?:\.[0-9]+)?)(?:±([0-9]+(?:\.[0-9]+)?))?"#)
    private static let numberPattern = #"(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"#

    public static func lineMatches(_ pattern: String, _ actual: String) -> Bool {
        guard pattern.contains(ellipsis) || pattern.contains("≈") else { return pattern == actual }
        // Build a regular expression: literal text, `...` as any text, `≈x` / `≈x±t` as a captured number.
        var regex = "^"
        var tolerances: [(value: Double, tolerance: Double)] = []
        let ns = pattern as NSString
        var cursor = 0
        func literal(_ s: String) {
            let parts = s.components(separatedBy: ellipsis)
            regex += parts.map { NSRegularExpression.escapedPattern(for: $0) }.joined(separator: ".*?")
        }
        for m in approximate.matches(in: pattern, range: NSRange(location: 0, length: ns.length)) {
            literal(ns.substring(with: NSRange(location: cursor, length: m.range.location - cursor)))
            let number = ns.substring(with: m.range(at: 1))
            let tolerance: Double
            if m.range(at: 2).location != NSNotFound {
                tolerance = Double(ns.substring(with: m.range(at: 2)))!
            } else {
                let decimals = number.split(separator: ".").dropFirst().first?.count ?? 0
                tolerance = pow(10, -Double(decimals)) * 1.000001
            }
            tolerances.append((Double(number)!, tolerance))
            regex += numberPattern
            cursor = m.range.location + m.range.length
        }
        literal(ns.substring(from: cursor))
        regex += "$"
        guard let re = try? NSRegularExpression(pattern: regex, options: [.dotMatchesLineSeparators]) else { return false }
        let a = actual as NSString
        guard let m = re.firstMatch(in: actual, range: NSRange(location: 0, length: a.length)) else { return false }
        for (i, t) in tolerances.enumerated() {
            guard let v = Double(a.substring(with: m.range(at: i + 1))), abs(v - t.value) <= t.tolerance else { return false }
        }
        return true
    }
}
