// The quic-go HTTP/3 client of tests/http3/test_http3.py and benchmarks/h3.py, against
// tests/apps/h3_app.py. Each check prints one JSON line, or exits non-zero with a message.
//
//	get        -n N: N requests in turn on one connection (the pid answering each)
//	post       -size B: a B-byte upload, its SHA-256 checked against the app's
//	stream     -chunks N -chunk-size B: a streamed response, every byte checked
//	concurrent -n N: N requests open at once on one connection
//	bench      -c C -duration D: requests a second with C requests open at once
//	download   -size B: seconds to fetch B bytes (/large)
//	idle       -n N: N connections, each after one request; "ready" on stdout, held
//	           until stdin closes (memory per idle connection)
//
// -proto h3 (default) or h2 (net/http over TLS, for the benchmark's HTTP/2 column).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
)

var (
	addr      = flag.String("addr", "127.0.0.1:8443", "host:port (UDP for h3, TCP for h2)")
	caFile    = flag.String("ca", "", "PEM CA that signed the server's certificate")
	proto     = flag.String("proto", "h3", "h3 or h2")
	n         = flag.Int("n", 10, "requests or connections")
	size      = flag.Int("size", 1<<20, "bytes")
	chunks    = flag.Int("chunks", 200, "streamed chunks")
	chunkSize = flag.Int("chunk-size", 1000, "bytes per streamed chunk")
	conc      = flag.Int("c", 1, "requests open at once (bench)")
	duration  = flag.Duration("duration", 3*time.Second, "bench length")
	timeout   = flag.Duration("timeout", 30*time.Second, "whole-check deadline")
)

type info struct {
	HTTPVersion string `json:"http_version"`
	Scheme      string `json:"scheme"`
	Pid         int    `json:"pid"`
	Bytes       int    `json:"bytes"`
	Sha256      string `json:"sha256"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func tlsConfig() *tls.Config {
	cfg := &tls.Config{ServerName: "localhost"}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail("reading -ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fail("no certificate in %s", *caFile)
		}
		cfg.RootCAs = pool
	}
	return cfg
}

// newClient: one client, whose requests share one connection.
func newClient() (*http.Client, func()) {
	if *proto == "h2" {
		tr := &http.Transport{TLSClientConfig: tlsConfig(), ForceAttemptHTTP2: true, MaxConnsPerHost: 1}
		return &http.Client{Transport: tr}, tr.CloseIdleConnections
	}
	tr := &http3.Transport{TLSClientConfig: tlsConfig()}
	return &http.Client{Transport: tr}, func() { tr.Close() }
}

func url(path string) string { return "https://" + *addr + path }

func do(ctx context.Context, c *http.Client, method, path string, body []byte) ([]byte, *http.Response) {
	req, err := http.NewRequestWithContext(ctx, method, url(path), bytes.NewReader(body))
	if err != nil {
		fail("%v", err)
	}
	if body == nil {
		req.Body = nil
	}
	resp, err := c.Do(req)
	if err != nil {
		fail("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		fail("%s %s: reading the body: %v", method, path, err)
	}
	if resp.StatusCode != 200 {
		fail("%s %s: status %d", method, path, resp.StatusCode)
	}
	return data, resp
}

func decode(data []byte) info {
	var i info
	if err := json.Unmarshal(data, &i); err != nil {
		fail("not JSON: %q", data)
	}
	return i
}

func emit(v map[string]any) {
	out, _ := json.Marshal(v)
	fmt.Println(string(out))
}

func main() {
	check := os.Args[1]
	flag.CommandLine.Parse(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, closeAll := newClient()
	defer closeAll()
	switch check {
	case "get":
		pids := []int{}
		var last info
		var resp *http.Response
		for i := 0; i < *n; i++ {
			var data []byte
			data, resp = do(ctx, c, "GET", "/info", nil)
			last = decode(data)
			pids = append(pids, last.Pid)
		}
		emit(map[string]any{"proto": resp.Proto, "pids": pids, "http_version": last.HTTPVersion, "scheme": last.Scheme})
	case "post":
		body := make([]byte, *size)
		rand.Read(body)
		sum := sha256.Sum256(body)
		data, resp := do(ctx, c, "POST", "/echo", body)
		got := decode(data)
		emit(map[string]any{"proto": resp.Proto, "bytes": got.Bytes, "sha_ok": got.Sha256 == hex.EncodeToString(sum[:])})
	case "stream":
		data, resp := do(ctx, c, "GET", fmt.Sprintf("/stream?chunks=%d&size=%d", *chunks, *chunkSize), nil)
		ok := len(data) == *chunks**chunkSize
		for i := 0; ok && i < len(data); i++ {
			ok = data[i] == byte((i / *chunkSize)%256)
		}
		emit(map[string]any{"proto": resp.Proto, "bytes": len(data), "ok": ok})
	case "concurrent":
		concurrent(ctx, c)
	case "bench":
		bench(ctx, c)
	case "download":
		start := time.Now()
		data, _ := do(ctx, c, "GET", fmt.Sprintf("/large?bytes=%d", *size), nil)
		if len(data) != *size {
			fail("download: %d bytes, not %d", len(data), *size)
		}
		emit(map[string]any{"seconds": time.Since(start).Seconds()})
	case "idle":
		idle(ctx)
	default:
		fail("unknown check %q", check)
	}
}

func concurrent(ctx context.Context, c *http.Client) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	pids := map[int]int{}
	var proto string
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			data, resp := do(ctx, c, "GET", fmt.Sprintf("/info?i=%d", i), nil)
			mu.Lock()
			pids[decode(data).Pid]++
			proto = resp.Proto
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	total := 0
	for _, k := range pids {
		total += k
	}
	emit(map[string]any{"proto": proto, "ok": total, "pids": len(pids)})
}

func bench(ctx context.Context, c *http.Client) {
	do(ctx, c, "GET", "/info", nil) // the connection, before the clock starts
	var count atomic.Int64
	deadline := time.Now().Add(*duration)
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				do(ctx, c, "GET", "/info", nil)
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	emit(map[string]any{"requests": count.Load(), "rps": float64(count.Load()) / duration.Seconds()})
}

func idle(ctx context.Context) {
	closers := []func(){}
	for i := 0; i < *n; i++ {
		c, closeOne := newClient()
		do(ctx, c, "GET", "/info", nil)
		closers = append(closers, closeOne)
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	for _, f := range closers {
		f()
	}
	emit(map[string]any{"connections": *n})
}
