"""Two TLS 1.3 connections with tlslite-ng (PyPI), the second resuming the first's
ticket with only the given PSK key-exchange mode offered: psk_ke (no key exchange at
all, which OpenSSL's s_client, Go and Java never offer alone) or psk_dhe_ke.

Usage: psk_client.py PORT MODE (from target/python/venv's python)
Prints one JSON line per connection: {"port", "resumed", "group"}, the group being the
key share's group in the server's ServerHello as tlslite-ng read it (its number), null
when there was none. (tests/tests/key_exchange.rs)
"""

import json
import socket
import sys

from tlslite import HandshakeSettings, TLSConnection

port, mode = int(sys.argv[1]), sys.argv[2]


def connect(session):
    settings = HandshakeSettings()
    settings.minVersion = (3, 4)
    settings.maxVersion = (3, 4)
    settings.psk_modes = [mode]
    sock = socket.create_connection(("127.0.0.1", port))
    local_port = sock.getsockname()[1]
    conn = TLSConnection(sock)
    conn.handshakeClientCert(settings=settings, serverName="demo.test", session=session)
    conn.write(b"GET / HTTP/1.0\r\nHost: demo.test\r\n\r\n")
    reply = b""
    while True:
        chunk = conn.read()
        if not chunk:
            break
        reply += chunk
    if not reply.startswith(b"HTTP/1."):
        sys.exit(f"no HTTP response: {reply[:80]!r}")
    print(json.dumps({"port": local_port, "resumed": conn.resumed,
                      "group": conn.ecdhCurve}), flush=True)
    session = conn.session
    conn.close()
    return session


first = connect(None)
connect(first)
