package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
)

// checkReuse sends -n GET /hello one after another: every request after the first must
// go out on the first one's connection, reused.
func checkReuse(ctx context.Context, o options) (result, error) {
	t, err := newTarget(o)
	if err != nil {
		return nil, err
	}
	conns := newConnSet()
	var first connInfo
	for i := range o.requests {
		info, err := t.getHello(ctx)
		if err != nil {
			return nil, fmt.Errorf("request %d of %d: %w", i+1, o.requests, err)
		}
		conns.add(info)
		if i == 0 {
			first = info
			continue
		}
		if !info.reused || info.local != first.local {
			return nil, fmt.Errorf("request %d of %d went out on connection %s (reused: %t), want %s reused",
				i+1, o.requests, info.local, info.reused, first.local)
		}
	}
	if dials := t.dials.Load(); dials != 1 {
		return nil, fmt.Errorf("%d requests dialled %d connections, want 1", o.requests, dials)
	}
	return result{"requests": o.requests, "connections": conns.count(), "dials": t.dials.Load(),
		"proto": t.wantProto}, nil
}

// getHello sends GET /hello and reads the whole answer, which must be "hello".
func (t *target) getHello(ctx context.Context) (connInfo, error) {
	resp, info, err := t.do(ctx, http.MethodGet, "/hello", nil)
	if err != nil {
		return info, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return info, fmt.Errorf("GET /hello: reading the body: %w", err)
	}
	if string(body) != "hello" {
		return info, fmt.Errorf("GET /hello: body %q, want \"hello\"", body)
	}
	return info, nil
}

// checkConcurrent holds -n POST /echo requests open at once. Each sends a line, reads
// its echo, then waits until every request has got that far before ending its body.
// Over HTTP/2 all of them must be streams of the one connection the first GET /hello
// opened; over HTTP/1.1 each needs a connection of its own.
//
// The GET comes first because net/http, until it knows a host speaks HTTP/2, dials a
// connection for every request that is waiting for one: 50 cold requests share the first
// connection up, but 20 to 50 others get dialled and left idle.
func checkConcurrent(ctx context.Context, o options) (result, error) {
	t, err := newTarget(o)
	if err != nil {
		return nil, err
	}
	first, err := t.getHello(ctx)
	if err != nil {
		return nil, fmt.Errorf("the first request: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gate := newBarrier(o.requests)
	conns := newConnSet()
	errs := make(chan error, o.requests)
	for i := range o.requests {
		go func() {
			err := t.heldEcho(ctx, fmt.Sprintf("stream %d\n", i), gate, conns)
			if err != nil {
				cancel() // the others would wait for this one for ever
				err = fmt.Errorf("request %d of %d: %w", i+1, o.requests, err)
			}
			errs <- err
		}()
	}
	var failures []error
	for range o.requests {
		if err := <-errs; err != nil {
			failures = append(failures, err)
		}
	}
	if len(failures) > 0 {
		return nil, fmt.Errorf("%d of %d requests failed, %d were open at once; first: %w",
			len(failures), o.requests, gate.arrived(), failures[0])
	}
	if err := checkConnections(t, conns, first, o.requests); err != nil {
		return nil, err
	}
	return result{"requests": o.requests, "open_at_once": gate.arrived(), "connections": conns.count(),
		"dials": t.dials.Load(), "proto": t.wantProto}, nil
}

// checkConnections: one shared, reused connection over HTTP/2; one each over HTTP/1.1.
// Counting dials too shows no spare connection was opened and left idle.
func checkConnections(t *target, conns *connSet, first connInfo, n int) error {
	dials := int(t.dials.Load())
	if t.wantMajor == 1 {
		if conns.count() != n || dials != n {
			return fmt.Errorf("%d requests open at once went out on %d connections (%d dialled), want %d",
				n, conns.count(), dials, n)
		}
		return nil
	}
	conns.mu.Lock()
	defer conns.mu.Unlock()
	if len(conns.seen) != 1 || conns.seen[first.local] != n || conns.fresh != 0 || dials != 1 {
		return fmt.Errorf("%d HTTP/2 requests went out on connections %v (%d not reused, %d dialled in all), "+
			"want all on %s reused and no other dial", n, conns.seen, conns.fresh, dials, first.local)
	}
	return nil
}

// heldEcho POSTs line to /echo, reads it back, then keeps the request body open until
// gate opens, and finally expects nothing more.
func (t *target) heldEcho(ctx context.Context, line string, gate *barrier, conns *connSet) error {
	body := io.MultiReader(strings.NewReader(line), gateReader{ctx: ctx, gate: gate})
	resp, info, err := t.do(ctx, http.MethodPost, "/echo", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	conns.add(info)
	echoed := make([]byte, len(line))
	if _, err := io.ReadFull(resp.Body, echoed); err != nil {
		return fmt.Errorf("reading the echo of %q: %w", line, err)
	}
	if string(echoed) != line {
		return fmt.Errorf("echo %q, want %q", echoed, line)
	}
	gate.arrive()
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading the end of the echo: %w", err)
	}
	if len(rest) > 0 {
		return fmt.Errorf("%d bytes after the echo, want none: %q", len(rest), rest)
	}
	return nil
}

// barrier opens once n parties have arrived.
type barrier struct {
	mu    sync.Mutex
	n     int
	count int
	open  chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, open: make(chan struct{})} }

func (b *barrier) arrive() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count++
	if b.count == b.n {
		close(b.open)
	}
}

func (b *barrier) arrived() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.count
}

// gateReader is a request body's tail: it blocks until the gate opens, then ends.
type gateReader struct {
	ctx  context.Context
	gate *barrier
}

func (g gateReader) Read([]byte) (int, error) {
	select {
	case <-g.gate.open:
		return 0, io.EOF
	case <-g.ctx.Done():
		return 0, fmt.Errorf("waiting for the other requests (%d open): %w", g.gate.arrived(), g.ctx.Err())
	}
}

// checkEcho POSTs -size random bytes to /echo and compares the SHA-256 of the response,
// read as it streams, with that of what was sent.
func checkEcho(ctx context.Context, o options) (result, error) {
	t, err := newTarget(o)
	if err != nil {
		return nil, err
	}
	data := make([]byte, o.size)
	rand.NewChaCha8([32]byte{'z', 'i', 'g'}).Read(data) // never fails
	sent := sha256.Sum256(data)

	resp, _, err := t.do(ctx, http.MethodPost, "/echo", bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	digest := sha256.New()
	n, err := io.Copy(digest, resp.Body)
	if err != nil {
		return nil, fmt.Errorf("POST /echo: reading the response after %d bytes: %w", n, err)
	}
	received := digest.Sum(nil)
	if n != o.size || !bytes.Equal(received, sent[:]) {
		return nil, fmt.Errorf("POST /echo: got %d bytes with sha256 %x, sent %d with %x", n, received, o.size, sent)
	}
	return result{"bytes": n, "sha256": hex.EncodeToString(received), "proto": t.wantProto}, nil
}

// checkDownload GETs /download?n=SIZE and checks the body, read a buffer at a time,
// against the pattern bytes(i % 251) without ever holding it whole.
func checkDownload(ctx context.Context, o options) (result, error) {
	t, err := newTarget(o)
	if err != nil {
		return nil, err
	}
	path := fmt.Sprintf("/download?n=%d", o.size)
	resp, _, err := t.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.ContentLength != o.size {
		return nil, fmt.Errorf("GET %s: content-length %d, want %d", path, resp.ContentLength, o.size)
	}
	v := newPatternVerifier()
	reads, err := readInChunks(resp.Body, v)
	if err != nil {
		return nil, fmt.Errorf("GET %s: after %d bytes: %w", path, v.offset, err)
	}
	if v.offset != o.size {
		return nil, fmt.Errorf("GET %s: body ended after %d bytes, want %d", path, v.offset, o.size)
	}
	want := patternDigest(o.size)
	if got := v.digest.Sum(nil); !bytes.Equal(got, want) {
		return nil, fmt.Errorf("GET %s: sha256 %x, want %x", path, got, want)
	}
	return result{"bytes": v.offset, "reads": reads, "sha256": hex.EncodeToString(want), "proto": t.wantProto}, nil
}

// readInChunks feeds r to w 64 KiB at most at a time and counts the reads.
func readInChunks(r io.Reader, w io.Writer) (int, error) {
	buf := make([]byte, 64<<10)
	reads := 0
	for {
		n, err := r.Read(buf)
		reads++
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return reads, werr
			}
		}
		if errors.Is(err, io.EOF) {
			return reads, nil
		}
		if err != nil {
			return reads, err
		}
	}
}
