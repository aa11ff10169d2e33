"""One HTTPS GET with Python's ssl module (default context, no certificate check), to
127.0.0.1:PORT: a client whose ClientHello tests/tests/ja4.rs fingerprints.

Usage: python_client.py PORT
"""

import socket
import ssl
import sys

port = int(sys.argv[1])
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
with socket.create_connection(("127.0.0.1", port)) as raw:
    with context.wrap_socket(raw, server_hostname="demo.test") as tls:
        tls.sendall(b"GET / HTTP/1.0\r\nHost: demo.test\r\n\r\n")
        reply = b""
        while chunk := tls.recv(4096):
            reply += chunk
if not reply.startswith(b"HTTP/1."):
    sys.exit(f"no HTTP response: {reply[:80]!r}")
