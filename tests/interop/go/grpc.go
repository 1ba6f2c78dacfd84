package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The echo service's messages are raw bytes, not protobuf: the "raw" codec passes them
// through, and calls name it as content-subtype (content-type application/grpc+raw).
type rawCodec struct{}

func (rawCodec) Name() string { return "raw" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T, want *[]byte", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T, want *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func init() { encoding.RegisterCodec(rawCodec{}) }

// dialGRPC opens a client for o.addr: insecure credentials (h2c with prior knowledge)
// or TLS trusting the CA in o.caFile.
func dialGRPC(o options) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if o.transport == "h2" {
		var err error
		if creds, err = credentials.NewClientTLSFromFile(o.caFile, o.serverName); err != nil {
			return nil, fmt.Errorf("gRPC TLS credentials: %w", err)
		}
	}
	conn, err := grpc.NewClient("passthrough:///"+o.addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(rawCodec{}.Name())))
	if err != nil {
		return nil, fmt.Errorf("gRPC client for %s: %w", o.addr, err)
	}
	return conn, nil
}

// checkGRPCUnary calls /test.Echo/Say with "x": the answer must be "hello x".
func checkGRPCUnary(ctx context.Context, o options) (result, error) {
	conn, err := dialGRPC(o)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	request, reply := []byte("x"), []byte(nil)
	var p peer.Peer
	if err := conn.Invoke(ctx, "/test.Echo/Say", &request, &reply, grpc.Peer(&p)); err != nil {
		return nil, fmt.Errorf("/test.Echo/Say: %w", err)
	}
	if string(reply) != "hello x" {
		return nil, fmt.Errorf("/test.Echo/Say: reply %q, want \"hello x\"", reply)
	}
	alpn, err := negotiated(o, p)
	if err != nil {
		return nil, err
	}
	return result{"reply": string(reply), "alpn": alpn}, nil
}

// negotiated is the ALPN protocol of the call's TLS connection ("" without TLS), which
// must be h2.
func negotiated(o options, p peer.Peer) (string, error) {
	if o.transport != "h2" {
		return "", nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", fmt.Errorf("the call's connection has no TLS state (%T)", p.AuthInfo)
	}
	if proto := info.State.NegotiatedProtocol; proto != "h2" {
		return proto, fmt.Errorf("ALPN chose %q, want h2", proto)
	}
	return "h2", nil
}

// checkGRPCStream calls the server-streaming /test.Echo/Count with "N" (-n): the answer
// must be the N messages "0" .. "N-1", then status OK.
func checkGRPCStream(ctx context.Context, o options) (result, error) {
	conn, err := dialGRPC(o)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	got, err := count(ctx, conn, o.requests)
	if err != nil {
		return nil, fmt.Errorf("/test.Echo/Count after %d messages %q: %w", len(got), got, err)
	}
	for i, message := range got {
		if message != fmt.Sprint(i) {
			return nil, fmt.Errorf("/test.Echo/Count: messages %q, want \"0\" .. \"%d\"", got, o.requests-1)
		}
	}
	if len(got) != o.requests {
		return nil, fmt.Errorf("/test.Echo/Count: %d messages %q, want %d", len(got), got, o.requests)
	}
	return result{"messages": got}, nil
}

// count runs /test.Echo/Count(n) and returns the messages it streamed back.
func count(ctx context.Context, conn *grpc.ClientConn, n int) ([]string, error) {
	desc := &grpc.StreamDesc{StreamName: "Count", ServerStreams: true}
	stream, err := conn.NewStream(ctx, desc, "/test.Echo/Count")
	if err != nil {
		return nil, fmt.Errorf("opening the stream: %w", err)
	}
	request := []byte(fmt.Sprint(n))
	if err := stream.SendMsg(&request); err != nil {
		return nil, fmt.Errorf("sending the request: %w", err)
	}
	if err := stream.CloseSend(); err != nil {
		return nil, fmt.Errorf("closing the send side: %w", err)
	}
	var got []string
	for {
		var message []byte
		err := stream.RecvMsg(&message)
		if errors.Is(err, io.EOF) {
			return got, nil // the stream ended with status OK
		}
		if err != nil {
			return got, err
		}
		got = append(got, string(message))
	}
}

// checkGRPCError calls /test.Echo/Fail: it must fail with NOT_FOUND "nothing here".
func checkGRPCError(ctx context.Context, o options) (result, error) {
	conn, err := dialGRPC(o)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	request, reply := []byte("x"), []byte(nil)
	err = conn.Invoke(ctx, "/test.Echo/Fail", &request, &reply)
	s, ok := status.FromError(err)
	if err == nil || !ok || s.Code() != codes.NotFound || s.Message() != "nothing here" {
		return nil, fmt.Errorf("/test.Echo/Fail: error %v, want code NotFound, message \"nothing here\"", err)
	}
	return result{"code": s.Code().String(), "message": s.Message()}, nil
}
