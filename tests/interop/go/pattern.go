package main

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
)

// The app's /download body: byte i is i % 251 (a prime, so it never lines up with
// power-of-two buffer or frame sizes).
const patternPeriod = 251

// patternReader yields the first n bytes of the pattern.
type patternReader struct {
	offset, n int64
}

func (p *patternReader) Read(buf []byte) (int, error) {
	if p.offset >= p.n {
		return 0, io.EOF
	}
	buf = buf[:min(int64(len(buf)), p.n-p.offset)]
	for i := range buf {
		buf[i] = byte((p.offset + int64(i)) % patternPeriod)
	}
	p.offset += int64(len(buf))
	return len(buf), nil
}

// patternDigest is the SHA-256 of the first n bytes of the pattern.
func patternDigest(n int64) []byte {
	h := sha256.New()
	if _, err := io.Copy(h, &patternReader{n: n}); err != nil {
		panic(err) // neither side can fail
	}
	return h.Sum(nil)
}

// patternVerifier is written the body as it arrives: it hashes it and stops at the first
// byte that is not the pattern's.
type patternVerifier struct {
	offset int64
	digest hash.Hash
}

func newPatternVerifier() *patternVerifier { return &patternVerifier{digest: sha256.New()} }

func (v *patternVerifier) Write(p []byte) (int, error) {
	for i, b := range p {
		if want := byte((v.offset + int64(i)) % patternPeriod); b != want {
			return i, fmt.Errorf("byte %d is %d, want %d", v.offset+int64(i), b, want)
		}
	}
	v.digest.Write(p)
	v.offset += int64(len(p))
	return len(p), nil
}
