import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// An SVG (or any XML) document read with Foundation's XMLParser, flattened into its elements in document order:
/// what the timeline tests look at. Parsing fails on anything that is not well-formed XML.
public struct SVGDocument: Sendable {
    public struct Element: Sendable {
        public var name: String
        public var attributes: [String: String]
        /// The element's own text (not its children's).
        public var text: String
        /// Names of the enclosing elements, outermost first.
        public var ancestors: [String]
        /// `class` attributes of the enclosing elements, outermost first.
        public var ancestorClasses: [String]

        public func number(_ attribute: String) -> Double? { attributes[attribute].flatMap(Double.init) }
    }

    public let elements: [Element]

    public init(_ data: Data) throws {
        let collector = Collector()
        let parser = XMLParser(data: data)
        parser.delegate = collector
        guard parser.parse() else {
            throw TestSupportError("not well-formed XML: \(parser.parserError.map { "\($0)" } ?? "unknown error") "
                                   + "at line \(parser.lineNumber), column \(parser.columnNumber)")
        }
        elements = collector.done
    }

    public init(contentsOf path: String) throws {
        try self.init(try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    public var root: Element? { elements.first }

    /// Elements named `name`, with every attribute of `attributes` as given.
    public func all(_ name: String, _ attributes: [String: String] = [:]) -> [Element] {
        elements.filter { e in e.name == name && attributes.allSatisfy { e.attributes[$0.key] == $0.value } }
    }

    /// The `data-lane` names of the timeline's lanes, in order.
    public var lanes: [String] { all("g", ["class": "lane"]).compactMap { $0.attributes["data-lane"] } }

    private final class Collector: NSObject, XMLParserDelegate {
        var done: [Element] = []
        var open: [Int] = []

        func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                    attributes: [String: String] = [:]) {
            let parents = open.map { done[$0] }
            done.append(Element(name: name, attributes: attributes, text: "", ancestors: parents.map(\.name),
                                ancestorClasses: parents.compactMap { $0.attributes["class"] }))
            open.append(done.count - 1)
        }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            open.removeLast()
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            if let i = open.last { done[i].text += string }
        }
    }
}
