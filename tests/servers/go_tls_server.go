// A TLS server with no OpenSSL at all: Go's crypto/tls (tests/src/lib.rs `GoServer`).
// hstrace can only see it from the wire.
// Usage: go_tls_server TLS_PORT PLAIN_PORT CERT KEY LOG
// LOG gets "remote-port protocol reused request-time-ms" per request, like the other
// test servers' access logs. Go's server has no session-id cache: TLS 1.2 resumes by
// ticket only.
package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

func main() {
	if len(os.Args) != 6 {
		log.Fatal("usage: go_tls_server TLS_PORT PLAIN_PORT CERT KEY LOG")
	}
	tlsPort, plainPort, cert, key, logPath := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	out, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		io.WriteString(w, "ok\n")
		protocol, reused := r.Proto, "."
		if r.TLS != nil {
			protocol = map[uint16]string{tls.VersionTLS12: "TLSv1.2", tls.VersionTLS13: "TLSv1.3"}[r.TLS.Version]
			if r.TLS.DidResume {
				reused = "r"
			}
		}
		_, port, _ := net.SplitHostPort(r.RemoteAddr)
		ms := float64(time.Since(start).Microseconds()) / 1000
		mu.Lock()
		fmt.Fprintf(out, "%s %s %s %.3f\n", port, protocol, reused, ms)
		mu.Unlock()
	})
	quiet := log.New(io.Discard, "", 0)
	go func() {
		plain := &http.Server{Addr: "127.0.0.1:" + plainPort, Handler: handler, ErrorLog: quiet}
		log.Fatal(plain.ListenAndServe())
	}()
	srv := &http.Server{
		Addr:      "127.0.0.1:" + tlsPort,
		Handler:   handler,
		ErrorLog:  quiet,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
	}
	log.Fatal(srv.ListenAndServeTLS(cert, key))
}
