package main

import (
	"strings"
	"testing"
)

func TestHomeLockRefusesASecondMesh(t *testing.T) {
	home := t.TempDir()
	first, err := lockHome(home)
	if err != nil {
		t.Fatal(err)
	}
	first.setURL("nats://127.0.0.1:4999")
	if _, err := lockHome(home); err == nil || !strings.Contains(err.Error(), "--nats nats://127.0.0.1:4999") || !strings.Contains(err.Error(), home) {
		t.Fatalf("second lock: %v; want a refusal naming the home and the running mesh's URL", err)
	}
	first.release()
	again, err := lockHome(home)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.release()
}
