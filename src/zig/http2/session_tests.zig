//! Unit tests of the HTTP/2 session on byte slices (see the file's tests).
