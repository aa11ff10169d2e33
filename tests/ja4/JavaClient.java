// One HTTPS GET with Java's own TLS (JSSE, SunJSSE's defaults), trusting any certificate,
// to 127.0.0.1:PORT: a client whose ClientHello tests/tests/ja4.rs fingerprints.
// Usage: java JavaClient.java PORT (run as a single source file)

import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.security.cert.X509Certificate;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.TrustManager;
import javax.net.ssl.X509TrustManager;
import java.util.List;

public class JavaClient {
    public static void main(String[] args) throws Exception {
        TrustManager[] any = {new X509TrustManager() {
            public void checkClientTrusted(X509Certificate[] c, String a) {}
            public void checkServerTrusted(X509Certificate[] c, String a) {}
            public X509Certificate[] getAcceptedIssuers() { return new X509Certificate[0]; }
        }};
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(null, any, null);
        int port = Integer.parseInt(args[0]);
        try (SSLSocket s = (SSLSocket) context.getSocketFactory().createSocket("127.0.0.1", port)) {
            SSLParameters p = s.getSSLParameters();
            p.setServerNames(List.of(new SNIHostName("demo.test")));
            s.setSSLParameters(p);
            s.startHandshake();
            OutputStream out = s.getOutputStream();
            out.write("GET / HTTP/1.0\r\nHost: demo.test\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            byte[] reply = s.getInputStream().readAllBytes();
            String head = new String(reply, 0, Math.min(reply.length, 8), StandardCharsets.US_ASCII);
            if (!head.startsWith("HTTP/1.")) {
                throw new IllegalStateException("no HTTP response: " + head);
            }
        }
    }
}
