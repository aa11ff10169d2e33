"""The JA4 of every client's first ClientHello to one port on loopback, by ja4plus.

An implementation independent of hstrace's (tests/tests/ja4.rs compares the two): scapy
reads the loopback interface through a raw AF_PACKET socket (no libpcap, so no filter
in the kernel: packets are picked here by their TCP port), and each ClientHello to the
port goes to ja4plus's JA4Fingerprinter. Run as root, from target/python/venv's python.

Usage: capture.py PORT
Prints {"ready": true} once the socket is open, then one JSON line per connection:
{"port": CLIENT_PORT, "ja4": ..., "ja4_o": ..., "raw": ...}. Stops on SIGTERM/SIGINT.
"""

import json
import signal
import sys

from scapy.all import TCP, sniff
from ja4plus.fingerprinters.ja4 import JA4Fingerprinter

SYN, ACK = 0x02, 0x10


def main() -> None:
    port = int(sys.argv[1])
    fingerprinter = JA4Fingerprinter()
    # client ports whose first ClientHello was printed; a new SYN from a port forgets it
    done: set[int] = set()

    def out(obj: dict) -> None:
        print(json.dumps(obj), flush=True)

    def seen(packet) -> None:
        tcp = packet[TCP]
        client = int(tcp.sport)
        flags = int(tcp.flags)
        if flags & SYN and not flags & ACK:
            done.discard(client)
            return
        # loopback shows each packet twice (sent, received): the first copy counts
        if client in done or not bytes(tcp.payload):
            return
        ja4 = fingerprinter.process_packet(packet)
        if ja4 is None:
            return
        done.add(client)
        out(
            {
                "port": client,
                "ja4": ja4,
                "ja4_o": fingerprinter.last_fingerprint_original_order,
                "raw": fingerprinter.last_raw,
            }
        )

    def stop(*_):
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sniff(
        iface="lo",
        store=False,
        lfilter=lambda p: TCP in p and int(p[TCP].dport) == port,
        prn=seen,
        started_callback=lambda: out({"ready": True}),
    )


if __name__ == "__main__":
    main()
