// A TLS 1.3 server and client from Go's crypto/tls alone, for checking hstrace's
// key-exchange group (post-quantum hybrids included), HelloRetryRequests and JA4
// against Go's own view (tests/tests/key_exchange.rs, tests/tests/ja4.rs), and loading
// it with hybrid clients for the key-exchange what-if (xtask/src/validate/group.rs).
// Built by the tests and xtask into target/go/pqtls.
//
// Usage:
//
//	pqtls server PORT CERT KEY GROUPS
//	    HTTPS on 127.0.0.1:PORT, TLS 1.3 only, key exchange by GROUPS; answers each
//	    request "ok". Prints "listening" once it accepts connections.
//	pqtls client HOST:PORT GROUPS
//	    one connection, one HTTP/1.0 GET, then one JSON line: the client's port and
//	    the group Go negotiated (ConnectionState().CurveID), by number and name.
//
//	pqtls load HOST:PORT [flags]
//	    a closed-loop load (load.go): N users, each a loop of an exponential think time
//	    and one new connection (a full TLS 1.3 handshake, one GET, read to the end);
//	    one JSON object shaped like hsload's (`hsload/v1`) on stdout. `pqtls load -h`
//	    lists the flags.
//
// GROUPS is "default" (Go's own preferences: X25519MLKEM768 first) or a comma list of
// X25519MLKEM768, SecP256r1MLKEM768, SecP384r1MLKEM1024, X25519, P256, P384, P521.
package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

var names = map[string]tls.CurveID{
	"X25519MLKEM768":     tls.X25519MLKEM768,
	"SecP256r1MLKEM768":  tls.SecP256r1MLKEM768,
	"SecP384r1MLKEM1024": tls.SecP384r1MLKEM1024,
	"X25519":             tls.X25519,
	"P256":               tls.CurveP256,
	"P384":               tls.CurveP384,
	"P521":               tls.CurveP521,
}

// groups reads GROUPS: nil for Go's defaults.
func groups(arg string) []tls.CurveID {
	if arg == "default" {
		return nil
	}
	var out []tls.CurveID
	for _, n := range strings.Split(arg, ",") {
		id, ok := names[n]
		if !ok {
			log.Fatalf("unknown group %q", n)
		}
		out = append(out, id)
	}
	return out
}

func main() {
	log.SetFlags(0)
	switch {
	case len(os.Args) == 6 && os.Args[1] == "server":
		server(os.Args[2], os.Args[3], os.Args[4], groups(os.Args[5]))
	case len(os.Args) == 4 && os.Args[1] == "client":
		client(os.Args[2], groups(os.Args[3]))
	case len(os.Args) >= 3 && os.Args[1] == "load":
		load(os.Args[2], os.Args[3:])
	default:
		log.Fatal("usage: pqtls server PORT CERT KEY GROUPS | pqtls client HOST:PORT GROUPS | pqtls load HOST:PORT [flags]")
	}
}

func server(port, cert, key string, prefs []tls.CurveID) {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		log.Fatal(err)
	}
	config := &tls.Config{
		Certificates:     []tls.Certificate{pair},
		MinVersion:       tls.VersionTLS13,
		CurvePreferences: prefs,
		NextProtos:       []string{"http/1.1"},
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:"+port, config)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening")
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok\n")
		}),
		ErrorLog: log.New(io.Discard, "", 0),
	}
	log.Fatal(srv.Serve(ln))
}

func client(addr string, prefs []tls.CurveID) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{
		InsecureSkipVerify: true,
		CurvePreferences:   prefs,
		NextProtos:         []string{"http/1.1"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: demo.test\r\n\r\n"); err != nil {
		log.Fatal(err)
	}
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.") {
		log.Fatalf("no HTTP response: %q %v", status, err)
	}
	io.Copy(io.Discard, conn)
	state := conn.ConnectionState()
	_, p, _ := net.SplitHostPort(conn.LocalAddr().String())
	port, _ := strconv.Atoi(p)
	out, _ := json.Marshal(map[string]any{
		"port":       port,
		"curve_id":   uint16(state.CurveID),
		"curve":      state.CurveID.String(),
		"version":    tls.VersionName(state.Version),
		"did_resume": state.DidResume,
	})
	fmt.Println(string(out))
}
