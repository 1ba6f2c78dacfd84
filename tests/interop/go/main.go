// Command interop drives zigcorn's interop app (tests/apps/interop.py) with the clients
// Go programs really use: net/http over HTTP/1.1, h2c with prior knowledge and h2 over TLS
// (ALPN), and google.golang.org/grpc over h2c and TLS.
//
// Each run does one check against one transport and prints one JSON line saying what it
// saw. Any failure is a message on stderr and exit status 1; bad usage is exit status 2.
//
//	interop CHECK -addr 127.0.0.1:PORT -transport http1|h2c|h2 [-ca ca.pem] [flags]
//
// Checks: reuse, concurrent, echo, download (net/http); grpc-unary, grpc-stream,
// grpc-error (gRPC, transports h2c and h2 only); tls12 (net/http limited to TLS 1.2,
// transport h2 only).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
)

const mib = 1 << 20

// options are the flags every check shares.
type options struct {
	check      string
	addr       string
	transport  string
	caFile     string
	serverName string
	requests   int
	size       int64
	timeout    time.Duration
}

// result is what a check reports on success: printed as one JSON object.
type result map[string]any

// check runs against the server named by o and returns what it observed, or why it failed.
type check struct {
	run      func(ctx context.Context, o options) (result, error)
	requests int   // default for -n
	size     int64 // default for -size
	grpc     bool  // gRPC checks have no plain HTTP/1.1 transport
	tlsOnly  bool  // the check is about the TLS handshake: transport h2 only
}

var checks = map[string]check{
	"reuse":       {run: checkReuse, requests: 5},
	"concurrent":  {run: checkConcurrent, requests: 50},
	"echo":        {run: checkEcho, size: 4 * mib},
	"download":    {run: checkDownload, size: 32 * mib},
	"grpc-unary":  {run: checkGRPCUnary, grpc: true},
	"grpc-stream": {run: checkGRPCStream, requests: 5, grpc: true},
	"grpc-error":  {run: checkGRPCError, grpc: true},
	"tls12":       {run: checkTLS12, tlsOnly: true},
}

func main() {
	o, c, err := parseArgs(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "interop: %v\n", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	start := time.Now()
	res, err := c.run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "interop %s over %s: FAILED: %v\n", o.check, o.transport, err)
		os.Exit(1)
	}
	res["check"] = o.check
	res["transport"] = o.transport
	res["elapsed_ms"] = time.Since(start).Milliseconds()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "interop: writing the result: %v\n", err)
		os.Exit(1)
	}
}

func parseArgs(args []string, usageOut io.Writer) (options, check, error) {
	if len(args) == 0 {
		return options{}, check{}, fmt.Errorf("no check given; one of %v", checkNames())
	}
	o := options{check: args[0]}
	c, ok := checks[o.check]
	if !ok {
		return o, c, fmt.Errorf("unknown check %q; one of %v", o.check, checkNames())
	}
	fs := flag.NewFlagSet(o.check, flag.ContinueOnError)
	fs.SetOutput(usageOut)
	fs.StringVar(&o.addr, "addr", "", "server address, host:port")
	fs.StringVar(&o.transport, "transport", "", "http1, h2c (prior knowledge) or h2 (TLS, ALPN)")
	fs.StringVar(&o.caFile, "ca", "", "PEM file of the CA that signed the server's certificate (h2)")
	fs.StringVar(&o.serverName, "server-name", "localhost", "TLS server name to send and verify (h2)")
	fs.IntVar(&o.requests, "n", c.requests, "requests (reuse, concurrent) or messages (grpc-stream)")
	fs.Int64Var(&o.size, "size", c.size, "body size in bytes (echo, download)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args[1:]); err != nil {
		return o, c, err
	}
	return o, c, validate(o, c)
}

func validate(o options, c check) error {
	switch {
	case o.addr == "":
		return errors.New("-addr is required")
	case o.transport != "http1" && o.transport != "h2c" && o.transport != "h2":
		return fmt.Errorf("-transport must be http1, h2c or h2, not %q", o.transport)
	case c.grpc && o.transport == "http1":
		return errors.New("gRPC needs HTTP/2: -transport h2c or h2")
	case c.tlsOnly && o.transport != "h2":
		return fmt.Errorf("%s is a TLS check: -transport h2", o.check)
	case o.transport == "h2" && o.caFile == "":
		return errors.New("-transport h2 needs -ca")
	}
	return nil
}

func checkNames() []string {
	names := make([]string, 0, len(checks))
	for name := range checks {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
