package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// checkTLS12 sends GET /hello over TLS from a net/http client with Go's defaults but for
// one thing: MaxVersion tls.VersionTLS12, as a Go program that cannot do TLS 1.3 yet would
// set it. ALPN offers h2 and http/1.1, as net/http does by default. It reports the
// protocol version, the cipher suite (IANA name) and the HTTP protocol the handshake and
// the response settled on; the answer must be a 200 with the body "hello".
func checkTLS12(ctx context.Context, o options) (result, error) {
	config, err := tlsConfig(o.caFile, o.serverName)
	if err != nil {
		return nil, err
	}
	config.MaxVersion = tls.VersionTLS12
	transport := &http.Transport{TLSClientConfig: config, ForceAttemptHTTP2: true}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+o.addr+"/hello", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET /hello with TLS 1.2 at most: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET /hello: reading the body: %w", err)
	}
	if resp.TLS == nil {
		return nil, errors.New("GET /hello: the response carries no TLS state")
	}
	return result{
		"status":  resp.StatusCode,
		"body":    string(body),
		"proto":   resp.Proto,
		"version": tls.VersionName(resp.TLS.Version),
		"cipher":  tls.CipherSuiteName(resp.TLS.CipherSuite),
		"alpn":    resp.TLS.NegotiatedProtocol,
	}, nil
}
