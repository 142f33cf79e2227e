package airflowtfos.hadooplab;

import java.util.Map;

/** Render a Hadoop {@code *-site.xml} holding only the given properties. */
final class SiteXml {
    private SiteXml() {
    }

    static String render(Map<String, String> properties) {
        StringBuilder b = new StringBuilder();
        b.append("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        b.append("<!-- Written by the Hadoop lab; rewritten on every start. -->\n");
        b.append("<configuration>\n");
        for (Map.Entry<String, String> e : properties.entrySet()) {
            b.append("  <property><name>").append(escape(e.getKey())).append("</name><value>")
                .append(escape(e.getValue())).append("</value></property>\n");
        }
        b.append("</configuration>\n");
        return b.toString();
    }

    private static String escape(String s) {
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;");
    }
}
