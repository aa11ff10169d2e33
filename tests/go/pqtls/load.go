// pqtls load: a closed-loop load generator whose clients can offer post-quantum hybrid
// key shares (Go's crypto/tls), for `cargo xtask validate-model --only whatif-group`:
// hsload, the project's other generator, links OpenSSL 3.0, which has no ML-KEM.
//
// N users, each a goroutine that loops: an exponential think time of mean Z, then one
// request: connect, a full TLS 1.3 handshake (no session is kept, so none is offered),
// `GET /`, read to the end (the server closes), close. A request's response time runs
// from the start of connect to the last byte of the response. Each request's client
// offers the groups of -groups, or with probability -also-share those of -also; the group
// Go negotiated (ConnectionState().CurveID) must be one it offered, else the request
// counts as an error ("group").
//
// After -warmup seconds, requests that finish within the next -duration seconds are
// counted; stderr says `pqtls: measuring` and `pqtls: measured` at the window's two ends.
// One JSON object shaped like hsload's (`hsload/v1`, tools/src/bin/hsload.rs) goes to
// stdout, with `key_exchange`: the requests by the group negotiated.
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"time"
)

// ioTimeout bounds connect, handshake and response: a request that takes longer is an
// error.
const ioTimeout = 10 * time.Second

// loadOpts is what `pqtls load` is asked.
type loadOpts struct {
	addr               string
	users              int
	thinkS             float64
	warmupS, durationS float64
	seed               uint64
	groups, also       []tls.CurveID
	alsoShare          float64
}

// done is one finished request.
type done struct {
	end             time.Time
	connectS, respS float64
	thinkS          float64 // NaN for a user's first request
	resumed         bool
	group           string
}

// failure is one failed request: when, and at which step.
type failure struct {
	end  time.Time
	what string
}

func load(addr string, args []string) {
	fs := flag.NewFlagSet("pqtls load", flag.ExitOnError)
	users := fs.Int("users", 1, "closed-loop users")
	think := fs.Float64("think-time", 0.2, "mean think time, seconds (exponential)")
	warmup := fs.Float64("warmup", 3, "seconds before the measured window")
	duration := fs.Float64("duration", 20, "the measured window, seconds")
	seed := fs.Uint64("seed", 1, "the think times' and the groups' random seed")
	g := fs.String("groups", "X25519", "the groups a client offers (GROUPS)")
	also := fs.String("also", "", "the groups offered instead by a share of the requests (GROUPS)")
	alsoShare := fs.Float64("also-share", 0, "that share, in [0, 1]")
	fs.Parse(args)
	o := loadOpts{
		addr: addr, users: *users, thinkS: *think, warmupS: *warmup, durationS: *duration,
		seed: *seed, groups: groups(*g), alsoShare: *alsoShare,
	}
	if *also != "" {
		o.also = groups(*also)
	}
	switch {
	case o.users < 1 || o.users > 4096:
		log.Fatalf("pqtls load: -users %d: 1 to 4096", o.users)
	case o.thinkS < 0 || o.warmupS < 0 || o.durationS <= 0:
		log.Fatal("pqtls load: -think-time and -warmup must be >= 0, -duration > 0")
	case o.alsoShare < 0 || o.alsoShare > 1 || (o.alsoShare > 0 && o.also == nil):
		log.Fatal("pqtls load: -also-share is a fraction in [0, 1], and needs -also")
	}
	out, err := json.Marshal(runLoad(o))
	if err != nil {
		log.Fatal(err)
	}
	os.Stdout.Write(append(out, '\n'))
}

// runLoad runs the users and sums up the measured window.
func runLoad(o loadOpts) map[string]any {
	begin := time.Now()
	from := begin.Add(secs(o.warmupS))
	to := from.Add(secs(o.durationS))
	var mu sync.Mutex
	var all []done
	var errs []failure
	var wg sync.WaitGroup
	for i := range o.users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, e := user(o, i, to)
			mu.Lock()
			all, errs = append(all, d...), append(errs, e...)
			mu.Unlock()
		}()
	}
	time.Sleep(time.Until(from))
	log.Print("pqtls: measuring")
	time.Sleep(time.Until(to))
	log.Print("pqtls: measured")
	wg.Wait()
	inside := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	var in []done
	for _, d := range all {
		if inside(d.end) {
			in = append(in, d)
		}
	}
	kinds := map[string]int{}
	nerr := 0
	for _, e := range errs {
		if inside(e.end) {
			kinds[e.what]++
			nerr++
		}
	}
	return summarise(o, in, nerr, kinds)
}

// summarise is the measured window's requests as hsload/v1 says them, and by group.
func summarise(o loadOpts, in []done, nerr int, kinds map[string]int) map[string]any {
	n := len(in)
	share := func(k int) float64 {
		if n == 0 {
			return 0
		}
		return float64(k) / float64(n)
	}
	class := func(keep func(done) bool) map[string]any {
		var r, c []float64
		for _, d := range in {
			if keep(d) {
				r, c = append(r, d.respS), append(c, d.connectS)
			}
		}
		return map[string]any{
			"requests": len(r), "share": share(len(r)),
			"response_s": summary(r), "connect_s": summary(c),
		}
	}
	byGroup := map[string]any{}
	for _, d := range in {
		if _, ok := byGroup[d.group]; !ok {
			g := d.group
			byGroup[g] = class(func(d done) bool { return d.group == g })
		}
	}
	var thinks []float64
	for _, d := range in {
		if !math.IsNaN(d.thinkS) {
			thinks = append(thinks, d.thinkS)
		}
	}
	var thinkMean any
	if len(thinks) > 0 {
		thinkMean = mean(thinks)
	}
	all := class(func(done) bool { return true })
	return map[string]any{
		"schema":           "hsload/v1",
		"generator":        "pqtls",
		"users":            o.users,
		"think_time_s":     o.thinkS,
		"groups":           groupNames(o.groups),
		"also":             groupNames(o.also),
		"also_share":       o.alsoShare,
		"warmup_s":         o.warmupS,
		"duration_s":       o.durationS,
		"requests":         n,
		"throughput_per_s": float64(n) / o.durationS,
		"response_s":       all["response_s"],
		"connect_s":        all["connect_s"],
		"classes": map[string]any{
			"tls_full":    class(func(d done) bool { return !d.resumed }),
			"tls_resumed": class(func(d done) bool { return d.resumed }),
			"plain":       class(func(done) bool { return false }),
		},
		"measured_secure_fraction": share(n),
		"resumption":               map[string]any{"offered": 0, "accepted": 0},
		"think_time_measured_s":    thinkMean,
		"errors":                   nerr,
		"error_kinds":              kinds,
		"key_exchange":             byGroup,
	}
}

// user is one user until stop: think, request, repeat. A think time that would end after
// stop ends the user instead.
func user(o loadOpts, index int, stop time.Time) ([]done, []failure) {
	// a stream per user
	rng := rand.New(rand.NewPCG(o.seed, uint64(index)+1))
	var out []done
	var errs []failure
	var lastEnd time.Time
	for {
		think := secs(rng.ExpFloat64() * o.thinkS)
		if time.Now().Add(think).After(stop) {
			return out, errs
		}
		time.Sleep(think)
		prefs := o.groups
		if o.alsoShare > 0 && rng.Float64() < o.alsoShare {
			prefs = o.also
		}
		started := time.Now()
		thinkS := math.NaN()
		if !lastEnd.IsZero() {
			thinkS = started.Sub(lastEnd).Seconds()
		}
		d, what := request(o.addr, prefs, started)
		end := time.Now()
		lastEnd = end
		if what != "" {
			errs = append(errs, failure{end, what})
			continue
		}
		d.end, d.thinkS, d.respS = end, thinkS, end.Sub(started).Seconds()
		out = append(out, d)
	}
}

// request makes one connection offering prefs, begun at started: a full handshake,
// `GET /`, read to the end. Its connect time, its class and group; else the step that
// failed.
func request(addr string, prefs []tls.CurveID, started time.Time) (done, string) {
	tcp, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return done{}, "connect"
	}
	connected := time.Since(started).Seconds()
	tcp.SetDeadline(time.Now().Add(ioTimeout))
	tcp.(*net.TCPConn).SetNoDelay(true)
	conn := tls.Client(tcp, &tls.Config{
		InsecureSkipVerify: true,
		ServerName:         "demo.test",
		CurvePreferences:   prefs,
		NextProtos:         []string{"http/1.1"},
	})
	defer conn.Close()
	if err := conn.Handshake(); err != nil {
		return done{}, "handshake"
	}
	state := conn.ConnectionState()
	if !slices.Contains(prefs, state.CurveID) {
		return done{}, "group"
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: demo.test\r\n\r\n"); err != nil {
		return done{}, "write"
	}
	body, err := io.ReadAll(conn)
	if err != nil {
		return done{}, "read"
	}
	if len(body) < 12 || string(body[:7]) != "HTTP/1." || string(body[8:12]) != " 200" {
		return done{}, "http_status"
	}
	return done{connectS: connected, resumed: state.DidResume, group: state.CurveID.String()}, ""
}

// summary is v's mean and percentiles as hsload gives them (nil when empty).
func summary(v []float64) any {
	if len(v) == 0 {
		return nil
	}
	v = slices.Clone(v)
	slices.Sort(v)
	q := func(p float64) float64 {
		i := int(math.Ceil(float64(len(v)) * p))
		return v[min(max(i, 1), len(v))-1]
	}
	return map[string]float64{"mean": mean(v), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99)}
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// groupNames is the groups' names as Go gives them (nil for Go's defaults).
func groupNames(ids []tls.CurveID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id.String())
	}
	return out
}
