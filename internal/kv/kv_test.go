package kv

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestStore(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("ns", []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing = %v", err)
	}
	if err := s.Put("ns", []byte("k/../x"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	s.Put("ns", []byte("k/../x"), []byte("v2"))
	if v, err := s.Get("ns", []byte("k/../x")); err != nil || string(v) != "v2" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if v, _ := s.Get("other", []byte("k/../x")); v != nil {
		t.Fatal("namespaces leak")
	}
	if err := s.Delete("ns", []byte("k/../x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("ns", []byte("k/../x")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete = %v", err)
	}
	if err := s.Put("ns", bytes.Repeat([]byte{1}, MaxKey+1), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big key = %v", err)
	}
	if err := s.Put("ns", []byte("k"), make([]byte, MaxValue+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big value = %v", err)
	}
	if err := s.Put("../escape", []byte("k"), nil); err == nil || !strings.Contains(err.Error(), "namespace") {
		t.Fatalf("bad namespace = %v", err)
	}
}
