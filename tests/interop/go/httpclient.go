package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"sync"
	"sync/atomic"
)

// target is a net/http client set up for one transport, and what its responses must show.
type target struct {
	base        string // scheme://host:port
	client      *http.Client
	wantProto   string       // resp.Proto
	wantMajor   int          // resp.ProtoMajor
	wantVersion string       // the app's x-http-version header: the ASGI scope's http_version
	dials       atomic.Int32 // TCP connections opened so far, seen through httptrace
}

// newTarget builds the client the way a Go program would for that transport:
//   - http1: HTTP/1.1 only, plain TCP.
//   - h2c:   unencrypted HTTP/2 only, which net/http speaks with prior knowledge.
//   - h2:    TLS offering both "h2" and "http/1.1" by ALPN; the server must pick h2.
func newTarget(o options) (*target, error) {
	protocols := new(http.Protocols)
	transport := &http.Transport{Protocols: protocols, MaxIdleConnsPerHost: 64}
	t := &target{
		base:        "http://" + o.addr,
		client:      &http.Client{Transport: transport},
		wantProto:   "HTTP/2.0",
		wantMajor:   2,
		wantVersion: "2",
	}
	switch o.transport {
	case "http1":
		protocols.SetHTTP1(true)
		t.wantProto, t.wantMajor, t.wantVersion = "HTTP/1.1", 1, "1.1"
	case "h2c":
		protocols.SetUnencryptedHTTP2(true)
	case "h2":
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
		config, err := tlsConfig(o.caFile, o.serverName)
		if err != nil {
			return nil, err
		}
		transport.TLSClientConfig = config
		t.base = "https://" + o.addr
	}
	return t, nil
}

// tlsConfig trusts only the CA in caFile and verifies the server as serverName.
func tlsConfig(caFile, serverName string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", caFile)
	}
	return &tls.Config{RootCAs: pool, ServerName: serverName}, nil
}

// connInfo is what httptrace said about the connection a request went out on.
type connInfo struct {
	local  string // the client side's address: tells connections apart
	reused bool
}

// traced returns ctx carrying a trace that records the request's connection into *info.
// A dial may outlive the request that started it, so dials are counted atomically.
func traced(ctx context.Context, info *connInfo, dials *atomic.Int32) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				dials.Add(1)
			}
		},
		GotConn: func(c httptrace.GotConnInfo) {
			info.local = c.Conn.LocalAddr().String()
			info.reused = c.Reused
		},
	})
}

// do sends a request built from method, path and body, and checks the response's status,
// protocol and x-http-version. The caller reads and closes the body.
func (t *target) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, connInfo, error) {
	var info connInfo
	req, err := http.NewRequestWithContext(traced(ctx, &info, &t.dials), method, t.base+path, body)
	if err != nil {
		return nil, info, fmt.Errorf("%s %s: %w", method, path, err)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, info, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if err := t.checkResponse(resp); err != nil {
		resp.Body.Close()
		return nil, info, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, info, nil
}

func (t *target) checkResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s, want 200", resp.Status)
	}
	if resp.Proto != t.wantProto || resp.ProtoMajor != t.wantMajor {
		return fmt.Errorf("response protocol %s (major %d), want %s", resp.Proto, resp.ProtoMajor, t.wantProto)
	}
	if got := resp.Header.Get("x-http-version"); got != t.wantVersion {
		return fmt.Errorf("x-http-version %q, want %q", got, t.wantVersion)
	}
	if resp.TLS != nil && resp.TLS.NegotiatedProtocol != "h2" {
		return fmt.Errorf("ALPN chose %q, want h2", resp.TLS.NegotiatedProtocol)
	}
	return nil
}

// connSet counts the distinct connections requests went out on; safe for goroutines.
type connSet struct {
	mu    sync.Mutex
	seen  map[string]int
	fresh int // requests that went out on a connection new to them (not reused)
}

func newConnSet() *connSet { return &connSet{seen: map[string]int{}} }

func (s *connSet) add(info connInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[info.local]++
	if !info.reused {
		s.fresh++
	}
}

func (s *connSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}
